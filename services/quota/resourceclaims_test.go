package quota

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/deviceclass/extendedresourcecache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/kcm-split/kcm-split/shared/features"
)

// ---- builders ----

func exact(class string, mode resourceapi.DeviceAllocationMode, count int64) resourceapi.DeviceRequest {
	return resourceapi.DeviceRequest{Name: "r", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class, AllocationMode: mode, Count: count}}
}

func firstAvailable(subs ...resourceapi.DeviceSubRequest) resourceapi.DeviceRequest {
	return resourceapi.DeviceRequest{Name: "r", FirstAvailable: subs}
}

func sub(class string, mode resourceapi.DeviceAllocationMode, count int64) resourceapi.DeviceSubRequest {
	return resourceapi.DeviceSubRequest{Name: "s", DeviceClassName: class, AllocationMode: mode, Count: count}
}

func claim(name string, reqs ...resourceapi.DeviceRequest) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, CreationTimestamp: metav1.Unix(1000, 0)},
		Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: reqs}},
	}
}

// generatedFor makes c the extended-resource claim the scheduler generates for pod.
func generatedFor(c *resourceapi.ResourceClaim, pod *v1.Pod) *resourceapi.ResourceClaim {
	c.Annotations = map[string]string{resourceapi.ExtendedResourceClaimAnnotation: "true"}
	c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID, Controller: ptr.To(true)}}
	return c
}

func classes(t *testing.T, cs ...*resourceapi.DeviceClass) *extendedresourcecache.ExtendedResourceCache {
	t.Helper()
	m := extendedresourcecache.NewExtendedResourceCache(klog.Background())
	for _, c := range cs {
		m.OnAdd(c, true)
	}
	return m
}

func deviceClass(name, extended string) *resourceapi.DeviceClass {
	c := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if extended != "" {
		c.Spec.ExtendedResourceName = &extended
	}
	return c
}

const (
	exactCount = resourceapi.DeviceAllocationModeExactCount
	allDevices = resourceapi.DeviceAllocationModeAll
)

func TestClaimsFromGates(t *testing.T) {
	if got := Claims(features.New()); got != (ClaimOptions{Devices: true, ExtendedResources: true}) {
		t.Errorf("v1.36 defaults: %+v, want devices and extended resources", got)
	}
	off, err := features.Parse([]string{"DRAExtendedResource=false"})
	if err != nil {
		t.Fatal(err)
	}
	if got := Claims(off); got != (ClaimOptions{Devices: true}) {
		t.Errorf("DRAExtendedResource=false: %+v, want devices only", got)
	}
	if _, err := features.Parse([]string{"DynamicResourceAllocation=false"}); err == nil {
		t.Error("DynamicResourceAllocation is locked on in v1.36: turning it off must be refused")
	}
}

func TestClaimDeviceUsage(t *testing.T) {
	tests := []struct {
		name  string
		claim *resourceapi.ResourceClaim
		want  map[string]string
	}{
		{"no requests", claim("c"), map[string]string{
			"count/resourceclaims.resource.k8s.io": "1", "gold.deviceclass.resource.k8s.io/devices": "-"}},
		{"exact count", claim("c", exact("gold", exactCount, 3)), map[string]string{
			"count/resourceclaims.resource.k8s.io": "1", "gold.deviceclass.resource.k8s.io/devices": "3"}},
		{"all: as many as an allocation holds", claim("c", exact("gold", allDevices, 0)), map[string]string{
			"gold.deviceclass.resource.k8s.io/devices": "32"}},
		{"an unknown mode is charged nothing", claim("c", exact("gold", "FutureMode", 5)), map[string]string{
			"gold.deviceclass.resource.k8s.io/devices": "0"}},
		{"requests of one class add up, others apart", claim("c",
			exact("gold", exactCount, 1), exact("gold", exactCount, 2), exact("silver", exactCount, 4)), map[string]string{
			"gold.deviceclass.resource.k8s.io/devices": "3", "silver.deviceclass.resource.k8s.io/devices": "4"}},
		{"first available: the worst case per class", claim("c", firstAvailable(
			sub("gold", exactCount, 2), sub("gold", exactCount, 1), sub("silver", exactCount, 1))), map[string]string{
			"gold.deviceclass.resource.k8s.io/devices": "2", "silver.deviceclass.resource.k8s.io/devices": "1"}},
		{"first available with all", claim("c", firstAvailable(
			sub("gold", exactCount, 1), sub("gold", allDevices, 0))), map[string]string{
			"gold.deviceclass.resource.k8s.io/devices": "32"}},
		{"first available adds to an exact request of the class", claim("c",
			exact("gold", exactCount, 1), firstAvailable(sub("gold", exactCount, 2), sub("silver", exactCount, 1))), map[string]string{
			"gold.deviceclass.resource.k8s.io/devices": "3", "silver.deviceclass.resource.k8s.io/devices": "1"}},
		{"admin access is not exempt", func() *resourceapi.ResourceClaim {
			c := claim("c", exact("gold", exactCount, 2))
			c.Spec.Devices.Requests[0].Exactly.AdminAccess = ptr.To(true)
			return c
		}(), map[string]string{"gold.deviceclass.resource.k8s.io/devices": "2"}},
		{"a request of an unknown kind is charged nothing", claim("c", resourceapi.DeviceRequest{Name: "r"}), map[string]string{
			"count/resourceclaims.resource.k8s.io": "1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := claimDeviceUsage(tt.claim)
			checkUsage(t, got, tt.want)
			// Without extended resources the evaluator charges exactly this.
			e := claimEvaluator{opts: ClaimOptions{Devices: true}}
			if u := e.usage(tt.claim, time.Now()); !equalUsage(u, got) {
				t.Errorf("evaluator %v, want %v", u, got)
			}
		})
	}
}

// Over 80 lines: one table of cases, each a few lines; splitting it would scatter the cases.
func TestClaimExtendedResources(t *testing.T) {
	now := time.Now()
	gpuPod := pod(containers(container("c", rl("example.com/gpu", "2"), rl("example.com/gpu", "2"))))
	gpuPod.UID = "uid-1"
	pods := func(ps ...*v1.Pod) func(string, string) *v1.Pod {
		return func(ns, name string) *v1.Pod {
			for _, p := range ps {
				if p.Namespace == ns && p.Name == name {
					return p
				}
			}
			return nil
		}
	}
	owned := func(cs ...*resourceapi.ResourceClaim) func(string, types.UID) []*resourceapi.ResourceClaim {
		return func(string, types.UID) []*resourceapi.ResourceClaim { return cs }
	}
	gold := deviceClass("gold", "example.com/gpu")
	on := ClaimOptions{Devices: true, ExtendedResources: true}

	tests := []struct {
		name string
		e    claimEvaluator
		c    *resourceapi.ResourceClaim
		want map[string]string
	}{
		{"gate off: devices only", claimEvaluator{opts: ClaimOptions{Devices: true}, classes: classes(t, gold)},
			claim("c", exact("gold", exactCount, 2)), map[string]string{
				"gold.deviceclass.resource.k8s.io/devices":         "2",
				"requests.deviceclass.resource.kubernetes.io/gold": "-",
				"requests.example.com/gpu":                         "-",
			}},
		{"gate on: the class's implicit and declared names", claimEvaluator{opts: on, classes: classes(t, gold)},
			claim("c", exact("gold", exactCount, 2)), map[string]string{
				"gold.deviceclass.resource.k8s.io/devices":         "2",
				"requests.deviceclass.resource.kubernetes.io/gold": "2",
				"requests.example.com/gpu":                         "2",
			}},
		{"a class without an extended resource name: its implicit name only", claimEvaluator{opts: on, classes: classes(t, deviceClass("silver", ""))},
			claim("c", exact("silver", exactCount, 1)), map[string]string{
				"requests.deviceclass.resource.kubernetes.io/silver": "1",
			}},
		{"a class no DeviceClass exists for: no extended resource", claimEvaluator{opts: on, classes: classes(t, gold)},
			claim("c", exact("missing", exactCount, 1)), map[string]string{
				"missing.deviceclass.resource.k8s.io/devices":         "1",
				"requests.deviceclass.resource.kubernetes.io/missing": "-",
			}},
		{"the pod's own claim: what the pod is charged is not charged twice",
			claimEvaluator{opts: on, classes: classes(t, gold), pod: pods(gpuPod), ownedBy: owned()},
			generatedFor(claim("c", exact("gold", exactCount, 3)), gpuPod), map[string]string{
				"gold.deviceclass.resource.k8s.io/devices":         "3",
				"requests.example.com/gpu":                         "1",
				"requests.deviceclass.resource.kubernetes.io/gold": "3",
			}},
		{"the pod's own claim, fully covered by the pod", claimEvaluator{opts: on, classes: classes(t, gold), pod: pods(gpuPod)},
			generatedFor(claim("c", exact("gold", exactCount, 2)), gpuPod), map[string]string{
				"requests.example.com/gpu": "-",
			}},
		{"a pod with another UID: charged in full", claimEvaluator{opts: on, classes: classes(t, gold), pod: pods(func() *v1.Pod {
			p := gpuPod.DeepCopy()
			p.UID = "uid-2"
			return p
		}())}, generatedFor(claim("c", exact("gold", exactCount, 2)), gpuPod), map[string]string{
			"requests.example.com/gpu": "2",
		}},
		{"a pod whose status names another claim: charged in full", claimEvaluator{opts: on, classes: classes(t, gold), pod: pods(func() *v1.Pod {
			p := gpuPod.DeepCopy()
			p.Status.ExtendedResourceClaimStatus = &v1.PodExtendedResourceClaimStatus{ResourceClaimName: "other"}
			return p
		}())}, generatedFor(claim("c", exact("gold", exactCount, 2)), gpuPod), map[string]string{
			"requests.example.com/gpu": "2",
		}},
		{"not annotated: charged in full", claimEvaluator{opts: on, classes: classes(t, gold), pod: pods(gpuPod)},
			func() *resourceapi.ResourceClaim {
				c := generatedFor(claim("c", exact("gold", exactCount, 2)), gpuPod)
				c.Annotations = nil
				return c
			}(), map[string]string{"requests.example.com/gpu": "2"}},
		{"an older claim of the same pod carries it: charged in full",
			claimEvaluator{opts: on, classes: classes(t, gold), pod: pods(gpuPod), ownedBy: owned(func() *resourceapi.ResourceClaim {
				c := generatedFor(claim("older", exact("gold", exactCount, 2)), gpuPod)
				c.CreationTimestamp = metav1.Unix(999, 0)
				return c
			}())},
			generatedFor(claim("c", exact("gold", exactCount, 2)), gpuPod), map[string]string{"requests.example.com/gpu": "2"}},
		{"as old, an earlier name carries it: charged in full",
			claimEvaluator{opts: on, classes: classes(t, gold), pod: pods(gpuPod), ownedBy: owned(generatedFor(claim("a", exact("gold", exactCount, 2)), gpuPod))},
			generatedFor(claim("c", exact("gold", exactCount, 2)), gpuPod), map[string]string{"requests.example.com/gpu": "2"}},
		{"a terminal pod is charged nothing: the claim is, in full", claimEvaluator{opts: on, classes: classes(t, gold), pod: pods(func() *v1.Pod {
			p := gpuPod.DeepCopy()
			p.Status.Phase = v1.PodSucceeded
			return p
		}())}, generatedFor(claim("c", exact("gold", exactCount, 2)), gpuPod), map[string]string{
			"requests.example.com/gpu": "2",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkUsage(t, tt.e.usage(tt.c, now), tt.want)
		})
	}
}

func TestClaimResourceNames(t *testing.T) {
	on := ClaimOptions{Devices: true, ExtendedResources: true}
	off := ClaimOptions{Devices: true}
	claims, pods := claimsResource, podsResource
	tests := []struct {
		name string
		o    ClaimOptions
		want []any
	}{
		{"count/resourceclaims.resource.k8s.io", on, []any{claims}},
		{"gold.deviceclass.resource.k8s.io/devices", on, []any{claims}},
		{"gold.deviceclass.resource.k8s.io/devices", ClaimOptions{}, nil},
		{"requests.example.com/gpu", on, []any{pods, claims}},
		{"requests.example.com/gpu", off, []any{pods}},
		{"requests.deviceclass.resource.kubernetes.io/gold", on, []any{pods, claims}},
		{"requests.cpu", on, []any{pods}},
		{"resourceclaims", on, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := resourcesFor(v1.ResourceName(tt.name), tt.o)
			if len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("got %v, want %v", got, tt.want)
				}
			}
		})
	}
	p := namesByResource(rl("requests.example.com/gpu", "1", "gold.deviceclass.resource.k8s.io/devices", "1", "pods", "1"), on)
	if len(p[podsResource]) != 2 || len(p[claimsResource]) != 2 {
		t.Errorf("namesByResource = %v: want the extended resource under both pods and claims", p)
	}
}

func TestClaimUsageChanged(t *testing.T) {
	p := pod()
	p.UID = "u"
	base := claim("c", exact("gold", exactCount, 1))
	tests := []struct {
		name   string
		mutate func(*resourceapi.ResourceClaim)
		want   bool
	}{
		{"status only (allocation)", func(c *resourceapi.ResourceClaim) { c.Status.Allocation = &resourceapi.AllocationResult{} }, false},
		{"labels", func(c *resourceapi.ResourceClaim) { c.Labels = map[string]string{"a": "b"} }, false},
		{"becomes a pod's extended-resource claim", func(c *resourceapi.ResourceClaim) { generatedFor(c, p) }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cur := base.DeepCopy()
			tt.mutate(cur)
			if got := claimUsageChanged(base, cur); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// The cached claim keeps exactly what the evaluator reads.
func TestTrimClaim(t *testing.T) {
	p := pod()
	p.UID = "u"
	c := generatedFor(claim("c",
		exact("gold", exactCount, 2),
		firstAvailable(sub("silver", allDevices, 0), sub("gold", exactCount, 1))), p)
	c.Annotations["other"] = "x"
	c.Labels = map[string]string{"a": "b"}
	c.OwnerReferences = append(c.OwnerReferences, metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "x"})
	c.Spec.Devices.Requests[0].Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: "true"}}}
	c.Spec.Devices.Config = []resourceapi.DeviceClaimConfiguration{{Requests: []string{"r"}}}
	c.Status.Allocation = &resourceapi.AllocationResult{}
	want := claimDeviceUsage(c)
	e := claimEvaluator{opts: ClaimOptions{Devices: true, ExtendedResources: true}, classes: classes(t, deviceClass("gold", "example.com/gpu")), pod: func(string, string) *v1.Pod { return p }}
	wantFull := e.usage(c, time.Now())

	obj, _ := trimClaim(c.DeepCopy())
	trimmed := obj.(*resourceapi.ResourceClaim)
	if !equalUsage(claimDeviceUsage(trimmed), want) || !equalUsage(e.usage(trimmed, time.Now()), wantFull) {
		t.Errorf("trimmed usage %v, want %v", e.usage(trimmed, time.Now()), wantFull)
	}
	if extendedClaimOwner(trimmed) == nil || len(trimmed.OwnerReferences) != 1 || len(trimmed.Annotations) != 1 || trimmed.Labels != nil {
		t.Errorf("metadata not trimmed to the annotation and controller: %+v", trimmed.ObjectMeta)
	}
	if trimmed.Spec.Devices.Config != nil || trimmed.Spec.Devices.Requests[0].Exactly.Selectors != nil || trimmed.Status.Allocation != nil {
		t.Errorf("spec/status not trimmed: %+v", trimmed.Spec)
	}
}
