package pvbinder

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/kcm-split/kcm-split/shared/worker"
)

// Event reasons of recycling, upstream's.
const (
	ReasonVolumeRecycled = "VolumeRecycled"
	ReasonRecyclerPod    = "RecyclerPod"
)

const (
	// recyclerPodPrefix names a PV's recycler Pod, as upstream: recycler-for-<pv>.
	recyclerPodPrefix = "recycler-for-"
	// AnnRecycledVolume on a recycler Pod is the UID of the PV it scrubs: a new leader
	// carries on with the Pod of the PV's recycle in flight, and removes any other.
	AnnRecycledVolume = "pvbinder.kcm-split.io/recycled-volume-uid"
	// recyclerGrace is how long past its ActiveDeadlineSeconds (counted from its creation)
	// a recycler Pod may take before the recycle fails: the kubelet enforces the deadline
	// only once the Pod runs, and a Pod never scheduled would otherwise be waited for
	// forever (as upstream does).
	recyclerGrace = 30 * time.Second
	// recyclerCacheLag is how long a Pod just created may be missing from the informer
	// before it counts as deleted.
	recyclerCacheLag = 5 * time.Second
)

// No library serves this: upstream's template is in k8s.io/kubernetes' volume package.
//
// defaultRecyclerPod is upstream's default recycler Pod: in namespace default, never
// restarted, it mounts the volume at /scrub, deletes everything in it and fails unless it is
// then empty. Volumes[0] is the volume, its source set per PV.
func defaultRecyclerPod() *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "pv-recycler-", Namespace: metav1.NamespaceDefault},
		Spec: v1.PodSpec{
			ActiveDeadlineSeconds: ptr.To[int64](60),
			RestartPolicy:         v1.RestartPolicyNever,
			Volumes:               []v1.Volume{{Name: "vol"}},
			Containers: []v1.Container{{
				Name:         "pv-recycler",
				Image:        "registry.k8s.io/build-image/debian-base:bookworm-v1.0.6",
				Command:      []string{"/bin/sh"},
				Args:         []string{"-c", `test -e /scrub && find /scrub -mindepth 1 -delete && test -z "$(ls -A /scrub)" || exit 1`},
				VolumeMounts: []v1.VolumeMount{{Name: "vol", MountPath: "/scrub"}},
			}},
		},
	}
}

// loadRecyclerTemplate reads a recycler Pod template (YAML or JSON), which must have a volume.
func loadRecyclerTemplate(path string) (*v1.Pod, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(data) == 0 {
		return nil, fmt.Errorf("file was empty: %s", path)
	}
	obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(data, nil, &v1.Pod{})
	if err != nil {
		return nil, fmt.Errorf("failed decoding file %s: %w", path, err)
	}
	pod, ok := obj.(*v1.Pod)
	if !ok {
		return nil, fmt.Errorf("%s holds a %T, not a Pod", path, obj)
	}
	if len(pod.Spec.Volumes) < 1 {
		return nil, fmt.Errorf("pod specification (%s): does not contain any volume(s)", path)
	}
	return pod, nil
}

// recycler is the recycler Pod setting of one kind of volume.
type recycler struct {
	template             *v1.Pod
	minTimeout, perGiInc int
}

// recyclers are the settings of the two recyclable sources, NFS and hostPath.
type recyclers struct{ nfs, hostPath recycler }

// newRecyclers builds the settings from the options, loading template files.
func newRecyclers(o Options) (recyclers, error) {
	load := func(path string) (*v1.Pod, error) {
		if path == "" {
			return defaultRecyclerPod(), nil
		}
		return loadRecyclerTemplate(path)
	}
	nfs, err := load(o.RecyclerTemplateNFS)
	if err != nil {
		return recyclers{}, err
	}
	hp, err := load(o.RecyclerTemplateHostPath)
	if err != nil {
		return recyclers{}, err
	}
	return recyclers{
		nfs:      recycler{template: nfs, minTimeout: o.RecyclerMinTimeoutNFS, perGiInc: o.RecyclerIncrementNFS},
		hostPath: recycler{template: hp, minTimeout: o.RecyclerMinTimeoutHostPath, perGiInc: o.RecyclerIncrementHostPath},
	}, nil
}

// errNotRecyclable: only NFS and hostPath volumes are recyclable, as upstream.
var errNotRecyclable = errors.New("no recycler plugin found")

// No library serves this: upstream's timeout rule is in k8s.io/kubernetes' volume utilities.
//
// recyclerTimeout is the recycler Pod's ActiveDeadlineSeconds: the increment per whole Gi of
// the volume's capacity, at least the minimum.
func recyclerTimeout(r recycler, pv *v1.PersistentVolume) int64 {
	size := pv.Spec.Capacity[v1.ResourceStorage]
	gi := resource.MustParse("1Gi")
	t := size.Value() / gi.Value() * int64(r.perGiInc)
	return max(t, int64(r.minTimeout))
}

// recyclerPod is the Pod that scrubs pv: the template with pv's source as its first volume,
// its deadline, the name recycler-for-<pv> and the PV's UID.
func (rs recyclers) recyclerPod(pv *v1.PersistentVolume) (*v1.Pod, error) {
	var r recycler
	var src v1.VolumeSource
	switch {
	case pv.Spec.NFS != nil:
		r, src = rs.nfs, v1.VolumeSource{NFS: &v1.NFSVolumeSource{Server: pv.Spec.NFS.Server, Path: pv.Spec.NFS.Path}}
	case pv.Spec.HostPath != nil:
		r, src = rs.hostPath, v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: pv.Spec.HostPath.Path}}
	default:
		return nil, errNotRecyclable
	}
	pod := r.template.DeepCopy()
	pod.Spec.ActiveDeadlineSeconds = ptr.To(recyclerTimeout(r, pv))
	pod.Spec.Volumes[0].VolumeSource = src
	pod.Name, pod.GenerateName = recyclerPodPrefix+pv.Name, ""
	if pod.Namespace == "" {
		pod.Namespace = metav1.NamespaceDefault
	}
	pod.ResourceVersion, pod.UID = "", ""
	metav1.SetMetaDataAnnotation(&pod.ObjectMeta, AnnRecycledVolume, string(pv.UID))
	return pod, nil
}

// recycling tracks the recycles this process has under way, by PV UID: when it created the
// Pod, and the forwarding of the Pod's events to the PV.
type recycling struct {
	mu      sync.Mutex
	flights map[types.UID]*recycleFlight
}

type recycleFlight struct {
	created time.Time
	stop    context.CancelFunc
}

func (r *recycling) get(uid types.UID) *recycleFlight {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.flights[uid]
}

// begin records a flight (replacing none) and returns it.
func (r *recycling) begin(uid types.UID, f *recycleFlight) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.flights == nil {
		r.flights = map[types.UID]*recycleFlight{}
	}
	r.flights[uid] = f
}

// end stops forwarding and forgets the flight.
func (r *recycling) end(uid types.UID) {
	r.mu.Lock()
	f := r.flights[uid]
	delete(r.flights, uid)
	r.mu.Unlock()
	if f != nil && f.stop != nil {
		f.stop()
	}
}

// recycle runs the Recycle policy of a Released PV, one step per sync: create the recycler
// Pod, then, as the Pod informer reports it, make the PV Available when the Pod succeeded or
// Failed when it failed or ran out of time, deleting the Pod either way. Called with the
// PV's lock held; the Pod's changes queue the PV.
//
// A PV a recycle left Failed is not recycled again by itself (upstream recreates a recycler
// Pod at each sync of it, without bound): an admin who fixed the volume deletes and
// recreates the PV.
func (c *Controller) recycle(ctx context.Context, pv *v1.PersistentVolume) error {
	if pv.Status.Phase == v1.VolumeFailed || pv.DeletionTimestamp != nil || pv.Spec.ClaimRef == nil {
		return nil
	}
	logger := klog.FromContext(ctx)
	want, err := c.recyclers.recyclerPod(pv)
	if err != nil {
		return c.failVolume(ctx, pv, ReasonVolumeFailedRecycle, "No recycler plugin found for the volume!")
	}
	key := want.Namespace + "/" + want.Name
	obj, exists, err := c.pods.GetByKey(key)
	if err != nil {
		return err
	}
	flight := c.inFlight.get(pv.UID)
	if !exists && flight != nil {
		if time.Since(flight.created) < recyclerCacheLag {
			return worker.RequeueAfter(time.Second)
		}
		// A cache miss alone is no proof the Pod is gone (the informer may lag or relist):
		// only the apiserver's NotFound fails the recycle.
		live, err := c.client.CoreV1().Pods(want.Namespace).Get(ctx, want.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return c.recycleFailed(ctx, pv, nil, "recycler pod was deleted")
		case err != nil:
			return fmt.Errorf("reading recycler pod %s: %w", key, err)
		}
		obj, exists = live, true
	}
	if !exists {
		return c.startRecycler(ctx, pv, want)
	}
	pod := obj.(*v1.Pod)
	if pod.Annotations[AnnRecycledVolume] != string(pv.UID) {
		// Not this PV's recycle (an earlier PV of the same name, or anybody's Pod of that
		// name): removed, as upstream, and tried again.
		if err := c.deletePod(ctx, pod); err != nil {
			return fmt.Errorf("failed to delete old recycler pod %s: %w", key, err)
		}
		return worker.RequeueAfter(time.Second)
	}
	if flight == nil {
		// A recycle a previous leader started: carry on with its Pod.
		fctx, stop := context.WithCancel(klog.NewContext(c.background(), logger))
		c.forwardRecyclerEvents(fctx, pv, pod.Namespace, pod.Name)
		flight = &recycleFlight{created: pod.CreationTimestamp.Time, stop: stop}
		c.inFlight.begin(pv.UID, flight)
	}
	switch pod.Status.Phase {
	case v1.PodSucceeded:
		if err := c.deletePod(ctx, pod); err != nil {
			return fmt.Errorf("deleting recycler pod %s: %w", key, err)
		}
		c.inFlight.end(pv.UID)
		logger.V(2).Info("Volume recycled")
		c.recorder.Event(pv, v1.EventTypeNormal, ReasonVolumeRecycled, "Volume recycled")
		// Available again; a failure here recycles the volume once more, as upstream.
		return c.unbind(ctx, pv)
	case v1.PodFailed:
		msg := pod.Status.Message
		if msg == "" {
			msg = "pod failed, pod.Status.Message unknown"
		}
		return c.recycleFailed(ctx, pv, pod, msg)
	}
	// Counted from the Pod's creation, or this process's, whichever is later.
	start := pod.CreationTimestamp.Time
	if flight.created.After(start) {
		start = flight.created
	}
	deadline := start.Add(time.Duration(ptr.Deref(pod.Spec.ActiveDeadlineSeconds, 0))*time.Second + recyclerGrace)
	if left := time.Until(deadline); left > 0 {
		return worker.RequeueAfter(left)
	}
	return c.recycleFailed(ctx, pv, pod, fmt.Sprintf("recycler pod did not finish within %ds of its creation", int(time.Since(start).Seconds())))
}

// startRecycler creates the recycler Pod want for pv, unless a Pod still uses the claim's
// data, and forwards the Pod's Events to pv.
func (c *Controller) startRecycler(ctx context.Context, pv *v1.PersistentVolume, want *v1.Pod) error {
	logger := klog.FromContext(ctx)
	key := want.Namespace + "/" + want.Name
	// Not while a Pod still uses the claim's data, unless the claim name is another
	// claim's now (the PV is released all the same), as upstream.
	if pods := c.podsUsing(refKey(pv.Spec.ClaimRef)); len(pods) > 0 {
		if _, err := c.claim(refKey(pv.Spec.ClaimRef)); apierrors.IsNotFound(err) {
			c.recorder.Event(pv, v1.EventTypeNormal, ReasonVolumeFailedRecycle, "Volume is used by pods: "+strings.Join(pods, ","))
			return nil
		}
	}
	fctx, stop := context.WithCancel(klog.NewContext(c.background(), logger))
	// Watch the Pod's events from before it exists, so none is missed.
	c.forwardRecyclerEvents(fctx, pv, want.Namespace, want.Name)
	if _, err := c.client.CoreV1().Pods(want.Namespace).Create(ctx, want, metav1.CreateOptions{}); err != nil {
		stop()
		if apierrors.IsAlreadyExists(err) {
			return worker.RequeueAfter(time.Second) // the informer shows it soon
		}
		return fmt.Errorf("creating recycler pod %s for volume %s: %w", key, pv.Name, err)
	}
	c.inFlight.begin(pv.UID, &recycleFlight{created: time.Now(), stop: stop})
	logger.V(2).Info("Recycler pod created", "pod", key)
	return worker.RequeueAfter(time.Duration(*want.Spec.ActiveDeadlineSeconds)*time.Second + recyclerGrace)
}

// recycleFailed removes the recycler Pod (if any) and marks the PV Failed with upstream's
// event.
func (c *Controller) recycleFailed(ctx context.Context, pv *v1.PersistentVolume, pod *v1.Pod, reason string) error {
	if pod != nil {
		if err := c.deletePod(ctx, pod); err != nil {
			return fmt.Errorf("deleting recycler pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
	}
	c.inFlight.end(pv.UID)
	return c.failVolume(ctx, pv, ReasonVolumeFailedRecycle, "Recycle failed: failed to recycle volume: "+reason)
}

// deletePod deletes a recycler Pod, conditioned on its UID (never a Pod of the same name
// made since); one already gone is fine.
func (c *Controller) deletePod(ctx context.Context, pod *v1.Pod) error {
	err := c.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &pod.UID},
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// podsUsing names the Pods (ns/name) not terminated that use the claim with key ns/name.
func (c *Controller) podsUsing(key string) []string {
	pods, _ := podsOf(c.pods, key)
	var names []string
	for _, pod := range pods {
		if !podTerminated(pod) {
			names = append(names, pod.Namespace+"/"+pod.Name)
		}
	}
	return names
}

// forwardRecyclerEvents reports each new Event about the recycler Pod on the PV as a
// RecyclerPod event, as upstream, until ctx ends. A watch that closes is opened again after
// a second.
func (c *Controller) forwardRecyclerEvents(ctx context.Context, pv *v1.PersistentVolume, ns, name string) {
	ref := pv.DeepCopy()
	opts := metav1.ListOptions{FieldSelector: "involvedObject.name=" + name}
	w, err := c.client.CoreV1().Events(ns).Watch(ctx, opts)
	go func() {
		for ctx.Err() == nil {
			if err != nil {
				klog.FromContext(ctx).V(2).Info("Cannot watch recycler pod events", "pod", ns+"/"+name, "err", err)
			} else {
				c.forward(ctx, ref, w)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			w, err = c.client.CoreV1().Events(ns).Watch(ctx, opts)
		}
	}()
}

func (c *Controller) forward(ctx context.Context, pv *v1.PersistentVolume, w watch.Interface) {
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.ResultChan():
			if !ok {
				return
			}
			if e, isEvent := ev.Object.(*v1.Event); isEvent && ev.Type == watch.Added {
				c.recorder.Eventf(pv, e.Type, ReasonRecyclerPod, "Recycler pod: %s", e.Message)
			}
		}
	}
}

// recycledVolume names the PV a recycler Pod scrubs, or "".
func recycledVolume(pod *v1.Pod) string {
	if _, ok := pod.Annotations[AnnRecycledVolume]; !ok {
		return ""
	}
	name, _ := strings.CutPrefix(pod.Name, recyclerPodPrefix)
	return name
}
