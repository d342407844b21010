package pvbinder_test

// Integration tests: the pv-binder-controller binary, built as it ships, against a real etcd +
// kube-apiserver v1.36.3 (shared/testenv). The test plays every other actor: the scheduler
// (selected-node), external provisioners (creating and deleting PVs) and the protection
// controllers (removing the finalizers the API server's admission adds). PVs are cluster
// scoped, so each test gives its objects a StorageClass name of its own (its namespace):
// no test can bind another's PVs.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	storagehelpers "k8s.io/component-helpers/storage/volume"

	"github.com/kcm-split/kcm-split/services/pvbinder"
	"github.com/kcm-split/kcm-split/shared/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// controller is the shipped binary, built once per test binary.
var controller = testenv.Binary{ID: pvbinder.ControllerID}

// withController starts the binder (leader-elected, default flags unless args say
// otherwise) and returns a client and a namespace, which is also the test's class name.
func withController(t *testing.T, args ...string) (kubernetes.Interface, string, *testenv.Controller) {
	t.Helper()
	testenv.Require(t, env)
	client := env.Client(t)
	ns := env.Namespace(t)
	c := env.StartLeading(t, controller, "binder", args...)
	return client, ns, c
}

// ---- builders ----

func pv(name, class, size string, mutate ...func(*corev1.PersistentVolume)) *corev1.PersistentVolume {
	p := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              class,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp/" + name}},
		},
	}
	for _, m := range mutate {
		m(p)
	}
	return p
}

func claim(ns, name, class, size string, mutate ...func(*corev1.PersistentVolumeClaim)) *corev1.PersistentVolumeClaim {
	c := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
			StorageClassName: &class,
		},
	}
	for _, m := range mutate {
		m(c)
	}
	return c
}

func createPV(t *testing.T, c kubernetes.Interface, p *corev1.PersistentVolume) *corev1.PersistentVolume {
	t.Helper()
	out, err := c.CoreV1().PersistentVolumes().Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pv %s: %v", p.Name, err)
	}
	t.Cleanup(func() { deletePV(t, c, p.Name) })
	return out
}

func createClaim(t *testing.T, c kubernetes.Interface, pvc *corev1.PersistentVolumeClaim) *corev1.PersistentVolumeClaim {
	t.Helper()
	out, err := c.CoreV1().PersistentVolumeClaims(pvc.Namespace).Create(context.Background(), pvc, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create claim %s: %v", pvc.Name, err)
	}
	return out
}

// deletePV deletes a PV and plays the pv-protection controller, which is not running here.
func deletePV(t *testing.T, c kubernetes.Interface, name string) {
	ctx := context.Background()
	_ = c.CoreV1().PersistentVolumes().Delete(ctx, name, metav1.DeleteOptions{})
	_, _ = c.CoreV1().PersistentVolumes().Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
}

// deleteClaim deletes a claim and plays the pvc-protection controller.
func deleteClaim(t *testing.T, c kubernetes.Interface, ns, name string) {
	t.Helper()
	ctx := context.Background()
	if err := c.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := c.CoreV1().PersistentVolumeClaims(ns).Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

// ---- waiting ----

func waitPV(t *testing.T, c kubernetes.Interface, name, what string, cond func(*corev1.PersistentVolume) bool) *corev1.PersistentVolume {
	t.Helper()
	last, ok := testenv.PollObject(50*time.Millisecond, 60*time.Second, func(ctx context.Context) (*corev1.PersistentVolume, error) {
		return c.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
	}, cond)
	if !ok {
		t.Fatalf("PV %s never %s; last: %+v", name, what, describePV(last))
	}
	return last
}

func waitClaim(t *testing.T, c kubernetes.Interface, ns, name, what string, cond func(*corev1.PersistentVolumeClaim) bool) *corev1.PersistentVolumeClaim {
	t.Helper()
	var last *corev1.PersistentVolumeClaim
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := c.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = p
		return cond(p), nil
	})
	if err != nil {
		desc := "none"
		if last != nil {
			desc = fmt.Sprintf("phase=%s volumeName=%q annotations=%v", last.Status.Phase, last.Spec.VolumeName, last.Annotations)
		}
		t.Fatalf("claim %s/%s never %s; last: %s; events: %s", ns, name, what, desc, events(t, c, ns, name))
	}
	return last
}

func describePV(p *corev1.PersistentVolume) string {
	if p == nil {
		return "none"
	}
	return fmt.Sprintf("phase=%s claimRef=%v annotations=%v", p.Status.Phase, p.Spec.ClaimRef, p.Annotations)
}

func boundTo(volume string) func(*corev1.PersistentVolumeClaim) bool {
	return func(c *corev1.PersistentVolumeClaim) bool {
		return c.Status.Phase == corev1.ClaimBound && c.Spec.VolumeName == volume
	}
}

func phase(p corev1.PersistentVolumePhase) func(*corev1.PersistentVolume) bool {
	return func(v *corev1.PersistentVolume) bool { return v != nil && v.Status.Phase == p }
}

// events lists "Reason: message" of the events about object name in ns.
func events(t *testing.T, c kubernetes.Interface, ns, name string) string {
	t.Helper()
	list, err := c.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, e := range list.Items {
		out = append(out, e.Reason+": "+e.Message)
	}
	return strings.Join(out, " | ")
}

// waitMetric waits until the controller exports series with a value of at least atLeast.
func waitMetric(t *testing.T, ctrl *testenv.Controller, series string, atLeast float64) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return ctrl.Metric(series) >= atLeast, nil
	})
	if err != nil {
		t.Errorf("%s = %v, want >= %v", series, ctrl.Metric(series), atLeast)
	}
}

func waitEvent(t *testing.T, c kubernetes.Interface, ns, name, reason string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		return strings.Contains(events(t, c, ns, name), reason+":"), nil
	})
	if err != nil {
		t.Fatalf("no %s event on %s/%s; events: %s", reason, ns, name, events(t, c, ns, name))
	}
}

// ---- tests ----

func TestStaticBindEveryAnnotationAndPhase(t *testing.T) {
	c, ns, ctrl := withController(t)
	createPV(t, c, pv(ns+"-a", ns, "1Gi"))
	waitPV(t, c, ns+"-a", "Available", phase(corev1.VolumeAvailable))
	created := createClaim(t, c, claim(ns, "data", ns, "1Gi"))

	got := waitClaim(t, c, ns, "data", "Bound", boundTo(ns+"-a"))
	for _, k := range []string{storagehelpers.AnnBindCompleted, storagehelpers.AnnBoundByController} {
		if got.Annotations[k] != "yes" {
			t.Errorf("claim annotation %s = %q", k, got.Annotations[k])
		}
	}
	if q := got.Status.Capacity[corev1.ResourceStorage]; q.String() != "1Gi" {
		t.Errorf("claim capacity %s", q.String())
	}
	if len(got.Status.AccessModes) != 1 || got.Status.AccessModes[0] != corev1.ReadWriteOnce {
		t.Errorf("claim access modes %v", got.Status.AccessModes)
	}
	p := waitPV(t, c, ns+"-a", "Bound", phase(corev1.VolumeBound))
	if p.Spec.ClaimRef == nil || p.Spec.ClaimRef.UID != created.UID || p.Spec.ClaimRef.Name != "data" || p.Spec.ClaimRef.Namespace != ns {
		t.Errorf("claimRef %+v", p.Spec.ClaimRef)
	}
	if p.Annotations[storagehelpers.AnnBoundByController] != "yes" {
		t.Errorf("PV annotations %v", p.Annotations)
	}
	if p.Status.LastPhaseTransitionTime == nil {
		t.Error("no lastPhaseTransitionTime")
	}
	// The bind latency histogram saw it.
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return ctrl.Metric("kcm_split_pvbinder_claim_bind_duration_seconds_count") >= 1 &&
			ctrl.Metric(`pv_collector_bound_pvc_count{namespace="`+ns+`",storage_class="`+ns+`",volume_attributes_class=""}`) == 1, nil
	})
	if err != nil {
		t.Error("bind metrics not exported")
	}
}

func TestSmallestFitSelectorAndClass(t *testing.T) {
	c, ns, _ := withController(t)
	createPV(t, c, pv(ns+"-10g", ns, "10Gi"))
	createPV(t, c, pv(ns+"-3g", ns, "3Gi"))
	createPV(t, c, pv(ns+"-2g", ns, "2Gi"))
	createPV(t, c, pv(ns+"-other-class", ns+"-x", "3Gi"))
	createPV(t, c, pv(ns+"-labelled", ns, "20Gi", func(p *corev1.PersistentVolume) { p.Labels = map[string]string{"tier": "db"} }))
	for _, n := range []string{"-10g", "-3g", "-2g", "-other-class", "-labelled"} {
		waitPV(t, c, ns+n, "Available", phase(corev1.VolumeAvailable))
	}
	createClaim(t, c, claim(ns, "fit", ns, "3Gi"))
	waitClaim(t, c, ns, "fit", "bound to the smallest fitting PV", boundTo(ns+"-3g"))
	createClaim(t, c, claim(ns, "db", ns, "1Gi", func(p *corev1.PersistentVolumeClaim) {
		p.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "db"}}
	}))
	waitClaim(t, c, ns, "db", "bound to the labelled PV", boundTo(ns+"-labelled"))
	createClaim(t, c, claim(ns, "other", ns+"-x", "1Gi"))
	waitClaim(t, c, ns, "other", "bound to its class's PV", boundTo(ns+"-other-class"))
	if p, _ := c.CoreV1().PersistentVolumes().Get(context.Background(), ns+"-2g", metav1.GetOptions{}); p.Spec.ClaimRef != nil {
		t.Error("2Gi PV claimed")
	}
}

func TestPreBoundBothWays(t *testing.T) {
	c, ns, _ := withController(t)
	// PV pre-bound by name to a claim that does not exist yet: it waits, Available.
	createPV(t, c, pv(ns+"-reserved", ns, "5Gi", func(p *corev1.PersistentVolume) {
		p.Spec.ClaimRef = &corev1.ObjectReference{Namespace: ns, Name: "later"}
	}))
	createPV(t, c, pv(ns+"-plain", ns, "1Gi"))
	waitPV(t, c, ns+"-reserved", "Available", phase(corev1.VolumeAvailable))
	createClaim(t, c, claim(ns, "later", ns, "1Gi"))
	got := waitClaim(t, c, ns, "later", "bound to the PV reserved for it", boundTo(ns+"-reserved"))
	// The binder set the claim's volumeName, so the claim says bound-by-controller; the
	// PV's claimRef was the user's, so the PV does not.
	if got.Annotations[storagehelpers.AnnBoundByController] != "yes" {
		t.Error("claim bound by the binder lacks bound-by-controller")
	}
	p := waitPV(t, c, ns+"-reserved", "Bound", phase(corev1.VolumeBound))
	if _, ok := p.Annotations[storagehelpers.AnnBoundByController]; ok || p.Spec.ClaimRef.UID != got.UID {
		t.Errorf("reserved PV: %s", describePV(p))
	}
	// Claim naming its volume.
	createPV(t, c, pv(ns+"-named", ns, "9Gi"))
	createClaim(t, c, claim(ns, "named", ns, "1Gi", func(p *corev1.PersistentVolumeClaim) { p.Spec.VolumeName = ns + "-named" }))
	named := waitClaim(t, c, ns, "named", "bound to the volume it names", boundTo(ns+"-named"))
	if _, ok := named.Annotations[storagehelpers.AnnBoundByController]; ok {
		t.Error("a claim whose volumeName the user set is marked bound-by-controller")
	}
	// Claim naming a volume that is too small: VolumeMismatch.
	createPV(t, c, pv(ns+"-tiny", ns, "1Mi"))
	createClaim(t, c, claim(ns, "mismatch", ns, "1Gi", func(p *corev1.PersistentVolumeClaim) { p.Spec.VolumeName = ns + "-tiny" }))
	waitEvent(t, c, ns, "mismatch", pvbinder.ReasonVolumeMismatch)
	if p, _ := c.CoreV1().PersistentVolumes().Get(context.Background(), ns+"-plain", metav1.GetOptions{}); p.Spec.ClaimRef != nil {
		t.Error("plain PV claimed")
	}
}

func TestReclaimPolicies(t *testing.T) {
	c, ns, _ := withController(t)
	createPV(t, c, pv(ns+"-retain", ns, "1Gi"))
	createPV(t, c, pv(ns+"-ext", ns, "2Gi", func(p *corev1.PersistentVolume) {
		p.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimDelete
		p.Annotations = map[string]string{storagehelpers.AnnDynamicallyProvisioned: "example.com/test-provisioner"}
	}))
	createPV(t, c, pv(ns+"-orphan", ns, "3Gi", func(p *corev1.PersistentVolume) {
		p.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimDelete
	}))
	for _, n := range []string{"-retain", "-ext", "-orphan"} {
		waitPV(t, c, ns+n, "Available", phase(corev1.VolumeAvailable))
	}
	for i, n := range []string{"-retain", "-ext", "-orphan"} {
		name := fmt.Sprintf("c%d", i)
		createClaim(t, c, claim(ns, name, ns, fmt.Sprintf("%dGi", i+1)))
		waitClaim(t, c, ns, name, "Bound", boundTo(ns+n))
		deleteClaim(t, c, ns, name)
	}
	waitPV(t, c, ns+"-retain", "Released", phase(corev1.VolumeReleased))
	ext := waitPV(t, c, ns+"-ext", "Released", phase(corev1.VolumeReleased))
	waitPV(t, c, ns+"-orphan", "Failed", phase(corev1.VolumeFailed))
	waitEvent(t, c, "default", ns+"-orphan", pvbinder.ReasonVolumeFailedDelete)

	// The provisioner's PV waits for it: still Released, not Failed, after a while. A
	// sentinel claim bound after the deletes shows the binder has seen everything.
	createPV(t, c, pv(ns+"-sentinel", ns, "4Gi"))
	createClaim(t, c, claim(ns, "sentinel", ns, "4Gi"))
	waitClaim(t, c, ns, "sentinel", "Bound", boundTo(ns+"-sentinel"))
	for _, n := range []string{"-retain", "-ext"} {
		if p, _ := c.CoreV1().PersistentVolumes().Get(context.Background(), ns+n, metav1.GetOptions{}); p.Status.Phase != corev1.VolumeReleased || p.Spec.ClaimRef == nil {
			t.Errorf("%s: %s", n, describePV(p))
		}
	}
	// The provisioner deletes its volume and the PV.
	if ext.Spec.ClaimRef == nil {
		t.Fatal("released PV lost its claimRef")
	}
	deletePV(t, c, ns+"-ext")
	waitPV(t, c, ns+"-ext", "deleted", func(p *corev1.PersistentVolume) bool { return p == nil })
}

// TestClaimDeletedWhileBinding deletes claims right after creating them, racing the binder's
// binds. Every PV must end either untouched (Available) or released by its gone claim; none
// Bound. An untouched PV is also the state before the binder looked, so the wait needs a
// point after which no bind of a deleted claim can start: a sentinel claim, created after
// every delete and bound by a binder with one claim worker (a FIFO queue: every deleted
// claim's sync came first), of a class of its own so that it takes none of the test's PVs.
func TestClaimDeletedWhileBinding(t *testing.T) {
	c, ns, _ := withController(t, "--"+pvbinder.FlagWorkers+"=1")
	for i := range 20 {
		createPV(t, c, pv(fmt.Sprintf("%s-%02d", ns, i), ns, "1Gi"))
		createClaim(t, c, claim(ns, fmt.Sprintf("c%02d", i), ns, "1Gi"))
		deleteClaim(t, c, ns, fmt.Sprintf("c%02d", i))
	}
	sentinelClass := ns + "-sentinel"
	createPV(t, c, pv(ns+"-sentinel", sentinelClass, "1Gi"))
	createClaim(t, c, claim(ns, "sentinel", sentinelClass, "1Gi"))
	waitClaim(t, c, ns, "sentinel", "Bound", boundTo(ns+"-sentinel"))
	// A PV written by a bind of a deleted claim is Bound until the volume sync releases it:
	// wait for that; an Available PV without a claimRef stays so from here.
	for i := range 20 {
		name := fmt.Sprintf("%s-%02d", ns, i)
		waitPV(t, c, name, "Available or Released", func(p *corev1.PersistentVolume) bool {
			return p != nil && ((p.Status.Phase == corev1.VolumeAvailable && p.Spec.ClaimRef == nil) || p.Status.Phase == corev1.VolumeReleased)
		})
	}
}

func TestClaimLostWhenPVDeleted(t *testing.T) {
	c, ns, _ := withController(t)
	createPV(t, c, pv(ns+"-a", ns, "1Gi"))
	createClaim(t, c, claim(ns, "data", ns, "1Gi"))
	waitClaim(t, c, ns, "data", "Bound", boundTo(ns+"-a"))
	deletePV(t, c, ns+"-a")
	waitClaim(t, c, ns, "data", "Lost", func(p *corev1.PersistentVolumeClaim) bool { return p.Status.Phase == corev1.ClaimLost })
	waitEvent(t, c, ns, "data", pvbinder.ReasonClaimLost)
}

func createClass(t *testing.T, c kubernetes.Interface, name, provisioner string, mode storagev1.VolumeBindingMode, isDefault bool) {
	t.Helper()
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: provisioner, VolumeBindingMode: &mode}
	if isDefault {
		sc.Annotations = map[string]string{pvbinder.AnnDefaultClass: "true"}
	}
	if _, err := c.StorageV1().StorageClasses().Create(context.Background(), sc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.StorageV1().StorageClasses().Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

// provide plays an external provisioner: it creates a PV pre-bound to the claim, as
// external-provisioner does.
func provide(t *testing.T, c kubernetes.Interface, pvc *corev1.PersistentVolumeClaim, provisioner string) string {
	t.Helper()
	name := "pvc-" + string(pvc.UID)
	createPV(t, c, pv(name, *pvc.Spec.StorageClassName, "1Gi", func(p *corev1.PersistentVolume) {
		p.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimDelete
		p.Annotations = map[string]string{storagehelpers.AnnDynamicallyProvisioned: provisioner}
		p.Spec.ClaimRef = &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID, ResourceVersion: pvc.ResourceVersion}
	}))
	return name
}

func TestExternalProvisioningRoundTrip(t *testing.T) {
	c, ns, _ := withController(t)
	const prov = "example.com/test-provisioner"
	createClass(t, c, ns, prov, storagev1.VolumeBindingImmediate, false)
	createClaim(t, c, claim(ns, "dyn", ns, "1Gi"))
	got := waitClaim(t, c, ns, "dyn", "annotated for the provisioner", func(p *corev1.PersistentVolumeClaim) bool {
		return p.Annotations[storagehelpers.AnnStorageProvisioner] == prov && p.Annotations[storagehelpers.AnnBetaStorageProvisioner] == prov
	})
	waitEvent(t, c, ns, "dyn", pvbinder.ReasonExternalProvisioning)
	name := provide(t, c, got, prov)
	waitClaim(t, c, ns, "dyn", "bound to the provisioned PV", boundTo(name))
	// Claim deleted: the PV is Released and left to its provisioner (Delete policy).
	deleteClaim(t, c, ns, "dyn")
	waitPV(t, c, name, "Released", phase(corev1.VolumeReleased))
}

func TestWaitForFirstConsumer(t *testing.T) {
	c, ns, _ := withController(t)
	const prov = "example.com/wffc"
	createClass(t, c, ns, prov, storagev1.VolumeBindingWaitForFirstConsumer, false)
	createPV(t, c, pv(ns+"-static", ns, "1Gi"))
	createClaim(t, c, claim(ns, "late", ns, "1Gi"))
	waitEvent(t, c, ns, "late", pvbinder.ReasonWaitForFirstConsumer)
	got, err := c.CoreV1().PersistentVolumeClaims(ns).Get(context.Background(), "late", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.VolumeName != "" || got.Annotations[storagehelpers.AnnStorageProvisioner] != "" {
		t.Fatalf("did not wait for a consumer: %+v", got)
	}
	// The scheduler picked a node.
	metav1.SetMetaDataAnnotation(&got.ObjectMeta, storagehelpers.AnnSelectedNode, "node-1")
	if _, err := c.CoreV1().PersistentVolumeClaims(ns).Update(context.Background(), got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	got = waitClaim(t, c, ns, "late", "handed to the provisioner", func(p *corev1.PersistentVolumeClaim) bool {
		return p.Annotations[storagehelpers.AnnStorageProvisioner] == prov
	})
	name := provide(t, c, got, prov)
	waitClaim(t, c, ns, "late", "bound", boundTo(name))
	if p, _ := c.CoreV1().PersistentVolumes().Get(context.Background(), ns+"-static", metav1.GetOptions{}); p.Spec.ClaimRef != nil {
		t.Error("the binder chose a static PV for a WaitForFirstConsumer claim")
	}
}

func TestDefaultClassAppliedToClasslessClaims(t *testing.T) {
	c, ns, _ := withController(t)
	createClaim(t, c, claim(ns, "classless", "", "1Gi", func(p *corev1.PersistentVolumeClaim) { p.Spec.StorageClassName = nil }))
	waitEvent(t, c, ns, "classless", pvbinder.ReasonFailedBinding)
	createClass(t, c, ns+"-default", "example.com/default", storagev1.VolumeBindingImmediate, true)
	waitClaim(t, c, ns, "classless", "given the default class", func(p *corev1.PersistentVolumeClaim) bool {
		return p.Spec.StorageClassName != nil && *p.Spec.StorageClassName == ns+"-default"
	})
	waitClaim(t, c, ns, "classless", "handed to the default class's provisioner", func(p *corev1.PersistentVolumeClaim) bool {
		return p.Annotations[storagehelpers.AnnStorageProvisioner] == "example.com/default"
	})
}
