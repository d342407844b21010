package chart

// Each controller's scenario for the RBAC test: the core of what its own integration tests
// show, driven from outside with an admin client (the test plays kubelet where needed).

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/yaml"
)

// eventually polls cond for up to 60s, failing the test with what when it never holds.
func eventually(t *testing.T, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 60*time.Second, true, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// endpointsScenario: a Service and a ready Pod get Endpoints and an EndpointSlice (create);
// the Pod turning unready moves its address (update); a stray slice claiming to be the
// controller's is removed (slice delete); deleting the Service removes the Endpoints (delete).
// Custom Endpoints of a Service without a selector are mirrored into a slice, which goes with
// them.
// Over 80 lines: one Service's life (ready, unready, a stray slice, deleted) then the mirroring case, each step waiting on the controller in the run's namespace.
func endpointsScenario(t *testing.T, admin kubernetes.Interface, ns string, _ func() string) {
	ctx := context.Background()
	labels := map[string]string{"app": "web"}
	// EndpointSlices carry only Pods of known Nodes.
	nodeName := "ep-" + ns[len(ns)-6:]
	if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.CoreV1().Nodes().Delete(context.Background(), nodeName, metav1.DeleteOptions{}) })
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{
			{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP},
		}},
	}
	if _, err := admin.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-1", Labels: labels},
		Spec:       corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
	}
	created, err := admin.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	setPodReady := func(p *corev1.Pod, ready bool) *corev1.Pod {
		status := corev1.ConditionFalse
		if ready {
			status = corev1.ConditionTrue
		}
		p.Status = corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: "10.1.0.7", PodIPs: []corev1.PodIP{{IP: "10.1.0.7"}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}},
		}
		out, err := admin.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	created = setPodReady(created, true)
	addresses := func(ready bool) func(context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			ep, err := admin.CoreV1().Endpoints(ns).Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			for _, s := range ep.Subsets {
				addrs := s.NotReadyAddresses
				if ready {
					addrs = s.Addresses
				}
				for _, a := range addrs {
					if a.IP == "10.1.0.7" {
						return true, nil
					}
				}
			}
			return false, nil
		}
	}
	managed := metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=web,endpointslice.kubernetes.io/managed-by=endpointslice-controller.k8s.io"}
	sliced := func(ready bool) func(context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			list, err := admin.DiscoveryV1().EndpointSlices(ns).List(ctx, managed)
			if err != nil || len(list.Items) != 1 {
				return false, nil
			}
			for _, e := range list.Items[0].Endpoints {
				if e.Addresses[0] == "10.1.0.7" && e.Conditions.Ready != nil && *e.Conditions.Ready == ready {
					return true, nil
				}
			}
			return false, nil
		}
	}
	eventually(t, "the ready Pod's address in the Service's Endpoints", addresses(true))
	eventually(t, "the ready Pod in the Service's EndpointSlice", sliced(true))
	setPodReady(created, false)
	eventually(t, "the unready Pod's address among the not-ready addresses", addresses(false))
	eventually(t, "the unready Pod not ready in the EndpointSlice", sliced(false))
	stray := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-stray", Labels: map[string]string{
			discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	if _, err := admin.DiscoveryV1().EndpointSlices(ns).Create(ctx, stray, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the stray slice (not owned by the Service) deleted", func(ctx context.Context) (bool, error) {
		_, err := admin.DiscoveryV1().EndpointSlices(ns).Get(ctx, "web-stray", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err := admin.CoreV1().Services(ns).Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the Endpoints deleted with their Service", func(ctx context.Context) (bool, error) {
		_, err := admin.CoreV1().Endpoints(ns).Get(ctx, "web", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})

	ext := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ext"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "db", Port: 5432, Protocol: corev1.ProtocolTCP}}},
	}
	if _, err := admin.CoreV1().Services(ns).Create(ctx, ext, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	//lint:ignore SA1019 custom Endpoints are the input of the mirroring controller under test
	custom := &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ext"},
		//lint:ignore SA1019 as above
		Subsets: []corev1.EndpointSubset{{
			Addresses: []corev1.EndpointAddress{{IP: "192.0.2.5"}},
			Ports:     []corev1.EndpointPort{{Name: "db", Port: 5432, Protocol: corev1.ProtocolTCP}},
		}},
	}
	if _, err := admin.CoreV1().Endpoints(ns).Create(ctx, custom, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mirrored := metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=ext,endpointslice.kubernetes.io/managed-by=endpointslicemirroring-controller.k8s.io"}
	mirrorCount := func(want int) func(context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			list, err := admin.DiscoveryV1().EndpointSlices(ns).List(ctx, mirrored)
			return err == nil && len(list.Items) == want, nil
		}
	}
	eventually(t, "the custom Endpoints mirrored into a slice", mirrorCount(1))
	if err := admin.CoreV1().Endpoints(ns).Delete(ctx, "ext", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the mirrored slice deleted with its Endpoints", mirrorCount(0))
}

// namespaceScenario: a deleted namespace with a ConfigMap and a Pod in it has its content
// deleted and is finalized (it disappears).
func namespaceScenario(t *testing.T, admin kubernetes.Interface, _ string, _ func() string) {
	ctx := context.Background()
	victim := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "charttest-victim-"}}
	victim, err := admin.CoreV1().Namespaces().Create(ctx, victim, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().ConfigMaps(victim.Name).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Unscheduled, so deleting it needs no kubelet.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}
	if _, err := admin.CoreV1().Pods(victim.Name).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := admin.CoreV1().Namespaces().Delete(ctx, victim.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the deleted namespace emptied and finalized", func(ctx context.Context) (bool, error) {
		_, err := admin.CoreV1().Namespaces().Get(ctx, victim.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

// quotaScenario: a ResourceQuota's status shows the hard limits and the usage of what is in
// its namespace (a Pod, through its typed informer; ConfigMaps, through a metadata informer).
func quotaScenario(t *testing.T, admin kubernetes.Interface, ns string, _ func() string) {
	ctx := context.Background()
	rq := &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "q"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{
			corev1.ResourcePods: resource.MustParse("10"),
			"count/configmaps":  resource.MustParse("5"),
		}},
	}
	if _, err := admin.CoreV1().ResourceQuotas(ns).Create(ctx, rq, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Quota admission refuses what a quota without status would count.
	eventually(t, "the quota's hard limits and usage in its status", func(ctx context.Context) (bool, error) {
		got, err := admin.CoreV1().ResourceQuotas(ns).Get(ctx, "q", metav1.GetOptions{})
		return err == nil && len(got.Status.Hard) == 2 && len(got.Status.Used) == 2, nil
	})
	if _, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}
	if _, err := admin.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the quota's usage counting the Pod and the ConfigMap", func(ctx context.Context) (bool, error) {
		got, err := admin.CoreV1().ResourceQuotas(ns).Get(ctx, "q", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		pods, cms := got.Status.Used[corev1.ResourcePods], got.Status.Used["count/configmaps"]
		return pods.Value() == 1 && cms.Value() == 1 && len(got.Status.Hard) == 2, nil
	})
}

// pvbinderScenario: a claim binds to the matching volume, one no volume fits stays Pending;
// deleting the bound claim releases its volume.
// Over 80 lines: bind, recycle, provision and a failed provision in turn, the test playing the kubelet and the protection controllers between the binder's steps.
func pvbinderScenario(t *testing.T, admin kubernetes.Interface, ns string, snapshot func() string) {
	ctx := context.Background()
	empty := ""
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "charttest-pv-"},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp/charttest"}},
			// The claim below names this volume, so no other test's claim can take it.
		},
	}
	pv, err := admin.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.CoreV1().PersistentVolumes().Delete(context.Background(), pv.Name, metav1.DeleteOptions{})
	})
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			StorageClassName: &empty,
			VolumeName:       pv.Name,
		},
	}
	if _, err := admin.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the claim and the volume Bound to each other", func(ctx context.Context) (bool, error) {
		c, err := admin.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "data", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		v, err := admin.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return c.Status.Phase == corev1.ClaimBound && v.Status.Phase == corev1.VolumeBound &&
			v.Spec.ClaimRef != nil && v.Spec.ClaimRef.UID == c.UID, nil
	})
	// A claim no volume fits stays Pending (and gets a FailedBinding Event).
	pending := pvc.DeepCopy()
	pending.Name, pending.Spec.VolumeName = "too-big", ""
	pending.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("5Pi")
	if _, err := admin.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pending, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the unfitting claim Pending", func(ctx context.Context) (bool, error) {
		c, err := admin.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "too-big", metav1.GetOptions{})
		return err == nil && c.Status.Phase == corev1.ClaimPending, nil
	})
	_ = snapshot() // the bound and unbound gauges exist only while such objects do
	if err := admin.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, "data", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Play kube-controller-manager's pvc-protection controller: no Pod uses the claim, so
	// its protection finalizer goes and the claim with it.
	if _, err := admin.CoreV1().PersistentVolumeClaims(ns).Patch(ctx, "data", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	eventually(t, "the volume Released once its claim is gone", func(ctx context.Context) (bool, error) {
		v, err := admin.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
		return err == nil && v.Status.Phase == corev1.VolumeReleased, nil
	})

	// Recycle: a recycler Pod scrubs the released volume; once it succeeded (the test plays
	// the kubelet) the volume is Available again and the Pod removed.
	recycled := pv.DeepCopy()
	recycled.ObjectMeta = metav1.ObjectMeta{GenerateName: "charttest-recycled-"}
	recycled.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimRecycle
	recycled, err = admin.CoreV1().PersistentVolumes().Create(ctx, recycled, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.CoreV1().PersistentVolumes().Delete(context.Background(), recycled.Name, metav1.DeleteOptions{})
	})
	used := pvc.DeepCopy()
	used.Name, used.Spec.VolumeName = "used", recycled.Name
	if _, err := admin.CoreV1().PersistentVolumeClaims(ns).Create(ctx, used, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the claim to recycle Bound", func(ctx context.Context) (bool, error) {
		c, err := admin.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "used", metav1.GetOptions{})
		return err == nil && c.Status.Phase == corev1.ClaimBound, nil
	})
	if err := admin.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, "used", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().PersistentVolumeClaims(ns).Patch(ctx, "used", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	recycler := "recycler-for-" + recycled.Name
	eventually(t, "the recycler Pod Succeeded", func(ctx context.Context) (bool, error) {
		p, err := admin.CoreV1().Pods("default").Get(ctx, recycler, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		p.Status.Phase = corev1.PodSucceeded
		_, err = admin.CoreV1().Pods("default").UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err == nil, nil
	})
	eventually(t, "the recycled volume Available and its recycler Pod gone", func(ctx context.Context) (bool, error) {
		v, err := admin.CoreV1().PersistentVolumes().Get(ctx, recycled.Name, metav1.GetOptions{})
		if err != nil || v.Status.Phase != corev1.VolumeAvailable {
			return false, nil
		}
		_, err = admin.CoreV1().Pods("default").Get(ctx, recycler, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})

	// The host-path provisioner (--enable-hostpath-provisioner) creates a volume for a claim
	// of its class and, the claim gone, deletes it.
	class := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "charttest-" + ns}, Provisioner: "kubernetes.io/host-path"}
	if _, err := admin.StorageV1().StorageClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.StorageV1().StorageClasses().Delete(context.Background(), class.Name, metav1.DeleteOptions{})
	})
	dyn := pvc.DeepCopy()
	dyn.Name, dyn.Spec.VolumeName, dyn.Spec.StorageClassName = "dyn", "", &class.Name
	dyn, err = admin.CoreV1().PersistentVolumeClaims(ns).Create(ctx, dyn, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	provisioned := "pvc-" + string(dyn.UID)
	eventually(t, "the host-path claim Bound to its provisioned volume", func(ctx context.Context) (bool, error) {
		c, err := admin.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "dyn", metav1.GetOptions{})
		return err == nil && c.Status.Phase == corev1.ClaimBound && c.Spec.VolumeName == provisioned, nil
	})
	if err := admin.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, "dyn", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().PersistentVolumeClaims(ns).Patch(ctx, "dyn", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	// The binder deletes it; the test plays the pv-protection controller.
	eventually(t, "the provisioned volume deleted once its claim is gone", func(ctx context.Context) (bool, error) {
		v, err := admin.CoreV1().PersistentVolumes().Get(ctx, provisioned, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		if err == nil && v.DeletionTimestamp != nil {
			_, _ = admin.CoreV1().PersistentVolumes().Patch(ctx, provisioned, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		}
		return false, nil
	})

	// A Block claim of that class fails to provision (host path serves filesystems only): a
	// ProvisioningFailed Event, and volume_operation_errors_total, which an alert reads, gets
	// its series.
	block := pvc.DeepCopy()
	mode := corev1.PersistentVolumeBlock
	block.Name, block.Spec.VolumeName, block.Spec.StorageClassName, block.Spec.VolumeMode = "block", "", &class.Name, &mode
	if _, err := admin.CoreV1().PersistentVolumeClaims(ns).Create(ctx, block, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a ProvisioningFailed Event on the Block claim", func(ctx context.Context) (bool, error) {
		evs, err := admin.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=block,reason=ProvisioningFailed"})
		return err == nil && len(evs.Items) > 0, nil
	})
}

var poolGVR = schema.GroupVersionResource{Group: "lb.kcm-split.io", Version: "v1alpha1", Resource: "ipaddresspools"}

// servicelbScenario: a LoadBalancer Service gets an address from an IPAddressPool; deleting
// the Service releases it (the controller removes its finalizer).
func servicelbScenario(t *testing.T, admin kubernetes.Interface, ns string, _ func() string) {
	ctx := context.Background()
	dyn := dynamic.NewForConfigOrDie(env.Config)
	pool := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "lb.kcm-split.io/v1alpha1",
		"kind":       "IPAddressPool",
		"metadata":   map[string]any{"name": ns},
		"spec":       map[string]any{"addresses": []any{"10.251.7.0/30"}, "namespaces": []any{ns}},
	}}
	if _, err := dyn.Resource(poolGVR).Create(ctx, pool, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dyn.Resource(poolGVR).Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "lb"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{
			{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP},
		}},
	}
	if _, err := admin.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the Service's load balancer address from the pool", func(ctx context.Context) (bool, error) {
		s, err := admin.CoreV1().Services(ns).Get(ctx, "lb", metav1.GetOptions{})
		if err != nil || len(s.Status.LoadBalancer.Ingress) != 1 {
			return false, nil
		}
		return strings.HasPrefix(s.Status.LoadBalancer.Ingress[0].IP, "10.251.7."), nil
	})
	if err := admin.CoreV1().Services(ns).Delete(ctx, "lb", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the Service gone once the controller released its address", func(ctx context.Context) (bool, error) {
		_, err := admin.CoreV1().Services(ns).Get(ctx, "lb", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// installCRDs applies the CRDs of crds/ (which the chart renders through templates/crds.yaml
// with service-lb, or an operator applies), and waits until they are
// established.
func installCRDs(t *testing.T, dir string) {
	t.Helper()
	ctx := context.Background()
	dyn := dynamic.NewForConfigOrDie(env.Config)
	files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var obj map[string]any
		if err := yaml.Unmarshal(b, &obj); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		crd := &unstructured.Unstructured{Object: obj}
		if _, err := dyn.Resource(crdGVR).Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("%s: %v", f, err)
		}
		eventually(t, "CRD "+crd.GetName()+" established", func(ctx context.Context) (bool, error) {
			got, err := dyn.Resource(crdGVR).Get(ctx, crd.GetName(), metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
			for _, c := range conds {
				m, _ := c.(map[string]any)
				if m["type"] == "Established" && m["status"] == "True" {
					return true, nil
				}
			}
			return false, nil
		})
	}
}

// ipamClusterCIDR is the space the nodelifecycle scenario's Nodes get Pod ranges from.
const ipamClusterCIDR = "10.252.0.0/16"

// nodelifecycleScenario: of two Nodes in one zone, the one whose kubelet stops renewing its
// Lease is marked Unknown and tainted unreachable:NoExecute; its Pod is marked not ready and,
// tolerating the taint for no time, deleted. With node IPAM on, both Nodes get distinct Pod
// ranges first. The test plays both kubelets.
// Over 80 lines: the test plays both Nodes' kubelets; the live one's renewing goroutine must run until the last step silences it.
func nodelifecycleScenario(t *testing.T, admin kubernetes.Interface, ns string, snapshot func() string) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	suffix := ns[len(ns)-6:]
	alive, dead := "alive-"+suffix, "dead-"+suffix
	for _, name := range []string{alive, dead} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelTopologyZone: "zone-" + suffix}}}
		created, err := admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = admin.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
		// The controller writes the new Node too (taints, Pod ranges): post the status as a
		// kubelet does, on the latest version.
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			now := metav1.Now()
			created.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: now, LastTransitionTime: now, Reason: "KubeletReady"}}
			_, err := admin.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{})
			if apierrors.IsConflict(err) {
				latest, getErr := admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
				if getErr != nil {
					return getErr
				}
				created = latest
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		lease := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: corev1.NamespaceNodeLease},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: &name, LeaseDurationSeconds: ptr(int32(40)), RenewTime: &metav1.MicroTime{Time: time.Now()}},
		}
		if _, err := admin.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(ctx, lease, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = admin.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
	eventually(t, "distinct Pod ranges from "+ipamClusterCIDR+" on both Nodes", func(ctx context.Context) (bool, error) {
		var got []string
		for _, name := range []string{alive, dead} {
			n, err := admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil || len(n.Spec.PodCIDRs) != 1 || !strings.HasPrefix(n.Spec.PodCIDRs[0], "10.252.") {
				return false, nil
			}
			got = append(got, n.Spec.PodCIDRs[0])
		}
		return got[0] != got[1], nil
	})
	// The live kubelet renews its Lease every second until it is stopped.
	kubeletCtx, stopKubelet := context.WithCancel(ctx)
	go func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-kubeletCtx.Done():
				return
			case <-tick.C:
			}
			l, err := admin.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, alive, metav1.GetOptions{})
			if err != nil {
				continue
			}
			l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
			_, _ = admin.CoordinationV1().Leases(corev1.NamespaceNodeLease).Update(ctx, l, metav1.UpdateOptions{})
		}
	}()
	zero := int64(0)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "on-dead-node"},
		Spec: corev1.PodSpec{
			NodeName:   dead,
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
			// Without it, admission would give the Pod 300s of toleration.
			Tolerations: []corev1.Toleration{{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &zero}},
		},
	}
	created, err := admin.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	if _, err := admin.CoreV1().Pods(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the silent Node Unknown and tainted unreachable:NoExecute, the live one untouched", func(ctx context.Context) (bool, error) {
		d, err := admin.CoreV1().Nodes().Get(ctx, dead, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		a, err := admin.CoreV1().Nodes().Get(ctx, alive, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return readyStatus(d) == corev1.ConditionUnknown && hasTaint(d, corev1.TaintNodeUnreachable) &&
			readyStatus(a) == corev1.ConditionTrue && len(a.Spec.Taints) == 0, nil
	})
	eventually(t, "the Pod on the silent Node evicted", func(ctx context.Context) (bool, error) {
		p, err := admin.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err) || (err == nil && p.DeletionTimestamp != nil), nil
	})
	// The last kubelet goes silent too: every zone is down, and tainting pauses.
	stopKubelet()
	eventually(t, "NoExecute tainting paused with every zone down", func(context.Context) (bool, error) {
		return strings.Contains(snapshot(), `kcm_split_nodelifecycle_evictions_paused{reason="AllZonesDown"`), nil
	})
}

func readyStatus(n *corev1.Node) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return ""
}

func hasTaint(n *corev1.Node, key string) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == key && t.Effect == corev1.TaintEffectNoExecute {
			return true
		}
	}
	return false
}
