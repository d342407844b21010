package pvbinder

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/kcm-split/kcm-split/shared/testenv/fixtures"
)

const testNS = "ns"

// ---- builders ----

type pvOpt func(*v1.PersistentVolume)

func makePV(name, size string, opts ...pvOpt) *v1.PersistentVolume {
	fs := v1.PersistentVolumeFilesystem
	pv := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-pv-" + name), ResourceVersion: "1"},
		Spec: v1.PersistentVolumeSpec{
			Capacity:                      v1.ResourceList{v1.ResourceStorage: resource.MustParse(size)},
			AccessModes:                   []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: v1.PersistentVolumeReclaimRetain,
			VolumeMode:                    &fs,
			PersistentVolumeSource:        v1.PersistentVolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/tmp/" + name}},
		},
		Status: v1.PersistentVolumeStatus{Phase: v1.VolumeAvailable},
	}
	for _, o := range opts {
		o(pv)
	}
	return pv
}

func pvPhase(p v1.PersistentVolumePhase) pvOpt {
	return func(pv *v1.PersistentVolume) { pv.Status.Phase = p }
}
func pvClass(c string) pvOpt { return func(pv *v1.PersistentVolume) { pv.Spec.StorageClassName = c } }
func pvModes(m ...v1.PersistentVolumeAccessMode) pvOpt {
	return func(pv *v1.PersistentVolume) { pv.Spec.AccessModes = m }
}
func pvLabels(l map[string]string) pvOpt { return func(pv *v1.PersistentVolume) { pv.Labels = l } }
func pvBlock() pvOpt {
	return func(pv *v1.PersistentVolume) { b := v1.PersistentVolumeBlock; pv.Spec.VolumeMode = &b }
}
func pvDeleting() pvOpt {
	return func(pv *v1.PersistentVolume) { now := metav1.Now(); pv.DeletionTimestamp = &now }
}
func pvPolicy(p v1.PersistentVolumeReclaimPolicy) pvOpt {
	return func(pv *v1.PersistentVolume) { pv.Spec.PersistentVolumeReclaimPolicy = p }
}
func pvAnn(k, v string) pvOpt {
	return func(pv *v1.PersistentVolume) { metav1.SetMetaDataAnnotation(&pv.ObjectMeta, k, v) }
}

// pvRef pre-binds the PV to a claim; uid "" binds by name only.
func pvRef(name string, uid types.UID) pvOpt {
	return func(pv *v1.PersistentVolume) {
		pv.Spec.ClaimRef = &v1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: testNS, Name: name, UID: uid}
	}
}

type claimOpt func(*v1.PersistentVolumeClaim)

func makeClaim(name, size string, opts ...claimOpt) *v1.PersistentVolumeClaim {
	fs := v1.PersistentVolumeFilesystem
	empty := ""
	c := &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name, UID: claimUID(name), ResourceVersion: "1"},
		Spec: v1.PersistentVolumeClaimSpec{
			AccessModes:      []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources:        v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse(size)}},
			VolumeMode:       &fs,
			StorageClassName: &empty,
		},
		Status: v1.PersistentVolumeClaimStatus{Phase: v1.ClaimPending},
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

func claimUID(name string) types.UID { return types.UID("uid-claim-" + name) }

func claimClassOpt(c string) claimOpt {
	return func(pvc *v1.PersistentVolumeClaim) { pvc.Spec.StorageClassName = &c }
}
func claimNoClass() claimOpt {
	return func(pvc *v1.PersistentVolumeClaim) { pvc.Spec.StorageClassName = nil }
}
func claimModes(m ...v1.PersistentVolumeAccessMode) claimOpt {
	return func(pvc *v1.PersistentVolumeClaim) { pvc.Spec.AccessModes = m }
}
func claimSelector(l map[string]string) claimOpt {
	return func(pvc *v1.PersistentVolumeClaim) { pvc.Spec.Selector = &metav1.LabelSelector{MatchLabels: l} }
}
func claimBlock() claimOpt {
	return func(pvc *v1.PersistentVolumeClaim) { b := v1.PersistentVolumeBlock; pvc.Spec.VolumeMode = &b }
}
func claimVolume(name string) claimOpt {
	return func(pvc *v1.PersistentVolumeClaim) { pvc.Spec.VolumeName = name }
}
func claimAnn(k, v string) claimOpt {
	return func(pvc *v1.PersistentVolumeClaim) { metav1.SetMetaDataAnnotation(&pvc.ObjectMeta, k, v) }
}
func claimPhase(p v1.PersistentVolumeClaimPhase) claimOpt {
	return func(pvc *v1.PersistentVolumeClaim) { pvc.Status.Phase = p }
}

func makeClass(name, provisioner string, mode storagev1.VolumeBindingMode, isDefault bool) *storagev1.StorageClass {
	c := &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: name, ResourceVersion: "1"},
		Provisioner:       provisioner,
		VolumeBindingMode: &mode,
	}
	if isDefault {
		c.Annotations = map[string]string{AnnDefaultClass: "true"}
	}
	return c
}

// ---- an API server stand-in ----

// apiServer wraps a fake clientset with what the binder's safety relies on and the fake lacks:
// resourceVersion preconditions (a stale update fails with a conflict), new versions on every
// write, and the status subresource (a status update changes only status, an update only
// the rest). failAfter, when >= 0, makes every write after that many fail: a crash.
type apiServer struct {
	*fake.Clientset
	mu        sync.Mutex
	rv        int
	writes    int
	conflicts int
	failAfter int
}

var (
	pvResource  = schema.GroupVersionResource{Version: "v1", Resource: "persistentvolumes"}
	pvcResource = schema.GroupVersionResource{Version: "v1", Resource: "persistentvolumeclaims"}
)

func newAPIServer(objs ...runtime.Object) *apiServer {
	s := &apiServer{Clientset: fake.NewClientset(objs...), rv: 100, failAfter: -1}
	s.PrependReactor("update", "*", s.update)
	return s
}

func (s *apiServer) update(action clienttesting.Action) (bool, runtime.Object, error) {
	ua := action.(clienttesting.UpdateAction)
	res := ua.GetResource()
	if res != pvResource && res != pvcResource {
		return false, nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failAfter >= 0 && s.writes >= s.failAfter {
		return true, nil, fmt.Errorf("injected crash before write %d", s.writes+1)
	}
	obj := ua.GetObject().DeepCopyObject()
	m := obj.(metav1.Object)
	stored, err := s.Tracker().Get(res, ua.GetNamespace(), m.GetName())
	if err != nil {
		return true, nil, err
	}
	sm := stored.(metav1.Object)
	if m.GetResourceVersion() != sm.GetResourceVersion() {
		s.conflicts++
		return true, nil, apierrors.NewConflict(res.GroupResource(), m.GetName(), fmt.Errorf("the object has been modified"))
	}
	status := ua.GetSubresource() == "status"
	switch o := obj.(type) {
	case *v1.PersistentVolume:
		old := stored.(*v1.PersistentVolume)
		if status {
			st := o.Status
			o = old.DeepCopy()
			o.Status = st
		} else {
			o.Status = old.Status
		}
		obj = o
	case *v1.PersistentVolumeClaim:
		old := stored.(*v1.PersistentVolumeClaim)
		if status {
			st := o.Status
			o = old.DeepCopy()
			o.Status = st
		} else {
			o.Status = old.Status
		}
		obj = o
	}
	s.rv++
	s.writes++
	obj.(metav1.Object).SetResourceVersion(strconv.Itoa(s.rv))
	if err := s.Tracker().Update(res, obj, ua.GetNamespace()); err != nil {
		return true, nil, err
	}
	return true, obj.DeepCopyObject(), nil
}

func (s *apiServer) pv(t *testing.T, name string) *v1.PersistentVolume {
	t.Helper()
	o, err := s.Tracker().Get(pvResource, "", name)
	if err != nil {
		t.Fatalf("pv %s: %v", name, err)
	}
	return o.(*v1.PersistentVolume)
}

func (s *apiServer) claim(t *testing.T, name string) *v1.PersistentVolumeClaim {
	t.Helper()
	o, err := s.Tracker().Get(pvcResource, testNS, name)
	if err != nil {
		t.Fatalf("claim %s: %v", name, err)
	}
	return o.(*v1.PersistentVolumeClaim)
}

func (s *apiServer) counts() (writes, conflicts int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writes, s.conflicts
}

// ---- a controller over it ----

// fixture is one binder process: its own informer caches (fed by hand from the apiServer,
// so a test decides when the cache catches up) over a shared apiServer.
type fixture struct {
	t        *testing.T
	api      *apiServer
	c        *Controller
	recorder *record.FakeRecorder
	pvs      cache.Indexer
	claims   cache.Indexer
	classes  cache.Indexer
	pods     cache.Indexer
	registry *prometheus.Registry
}

func newFixture(t *testing.T, api *apiServer) *fixture {
	t.Helper()
	return newFixtureWith(t, api, DefaultOptions())
}

// newFixtureWith is newFixture with the controller's options.
func newFixtureWith(t *testing.T, api *apiServer, opts Options) *fixture {
	t.Helper()
	factory := informers.NewSharedInformerFactory(api, 0)
	f := &fixture{
		t:        t,
		api:      api,
		recorder: record.NewFakeRecorder(1000),
		pvs:      factory.Core().V1().PersistentVolumes().Informer().GetIndexer(),
		claims:   factory.Core().V1().PersistentVolumeClaims().Informer().GetIndexer(),
		classes:  factory.Storage().V1().StorageClasses().Informer().GetIndexer(),
		pods:     factory.Core().V1().Pods().Informer().GetIndexer(),
		registry: prometheus.NewRegistry(),
	}
	f.c = New(factory.Core().V1().PersistentVolumes(), factory.Core().V1().PersistentVolumeClaims(),
		factory.Storage().V1().StorageClasses(), factory.Core().V1().Pods(), api, f.recorder, opts, f.registry)
	t.Cleanup(f.c.volumeQueue.ShutDown)
	t.Cleanup(f.c.claimQueue.ShutDown)
	f.catchUp()
	return f
}

// catchUp replaces the caches with what the API server stores: the informers catching up.
func (f *fixture) catchUp() {
	f.t.Helper()
	tracker := f.api.Tracker()
	fixtures.CatchUp(f.t, tracker, f.pvs, pvResource, "PersistentVolume")
	fixtures.CatchUp(f.t, tracker, f.claims, pvcResource, "PersistentVolumeClaim")
	fixtures.CatchUp(f.t, tracker, f.classes, storagev1.SchemeGroupVersion.WithResource("storageclasses"), "StorageClass")
	fixtures.CatchUp(f.t, tracker, f.pods, v1.SchemeGroupVersion.WithResource("pods"), "Pod")
}

func (f *fixture) syncClaim(name string) error {
	return f.c.syncClaimKey(context.Background(), claimKey(testNS, name))
}

func (f *fixture) syncVolume(name string) error {
	return f.c.syncVolumeKey(context.Background(), name)
}

// settle syncs every claim and PV, catching the caches up between rounds, until a round
// writes nothing. Errors are retried in the next round, as the queue would.
func (f *fixture) settle() {
	f.t.Helper()
	for range 20 {
		before, _ := f.api.counts()
		f.catchUp()
		for _, o := range f.claims.List() {
			c := o.(*v1.PersistentVolumeClaim)
			_ = f.c.syncClaimKey(context.Background(), claimKey(c.Namespace, c.Name))
		}
		f.catchUp()
		for _, o := range f.pvs.List() {
			_ = f.syncVolume(o.(*v1.PersistentVolume).Name)
		}
		if after, _ := f.api.counts(); after == before {
			return
		}
	}
	f.t.Fatal("no quiescence after 20 rounds")
}

// events drains the recorded events.
func (f *fixture) events() []string { return fixtures.Events(f.recorder) }
