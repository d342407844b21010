package quota

import (
	"fmt"
	"math/rand"
	"slices"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	resourcehelper "k8s.io/component-helpers/resource"
)

// The compact Pod must be charged and scoped exactly as the Pod it stands for: same usage
// (value and format, since the format decides how status.used is written), at every moment,
// in every scope, under every combination of charge options, and the same answer for
// "did this update change usage" whichever of the two forms each side is in.

var podCacheEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// chargeVariants are every combination of the charge options that keep Pods compactable and
// that the evaluator could use; the feature gates only ever set the first two, as upstream.
// (UseDRANodeAllocatableResourceClaimStatus is left out: upstream's quota never sets it and
// trimPod, for the Pods kept whole, drops the status it reads.)
func chargeVariants() []resourcehelper.PodResourcesOptions {
	var out []resourcehelper.PodResourcesOptions
	for bits := range 16 {
		out = append(out, resourcehelper.PodResourcesOptions{
			UseStatusResources:                             bits&1 != 0,
			SkipPodLevelResources:                          bits&2 != 0,
			InPlacePodLevelResourcesVerticalScalingEnabled: bits&4 != 0,
			ExcludeOverhead:                                bits&8 != 0,
		})
	}
	return out
}

// allScopes are one requirement per scope and operator an evaluator distinguishes.
var allScopes = []v1.ScopedResourceSelectorRequirement{
	{ScopeName: v1.ResourceQuotaScopeTerminating, Operator: v1.ScopeSelectorOpExists},
	{ScopeName: v1.ResourceQuotaScopeNotTerminating, Operator: v1.ScopeSelectorOpExists},
	{ScopeName: v1.ResourceQuotaScopeBestEffort, Operator: v1.ScopeSelectorOpExists},
	{ScopeName: v1.ResourceQuotaScopeNotBestEffort, Operator: v1.ScopeSelectorOpExists},
	{ScopeName: v1.ResourceQuotaScopeCrossNamespacePodAffinity, Operator: v1.ScopeSelectorOpExists},
	{ScopeName: v1.ResourceQuotaScopePriorityClass, Operator: v1.ScopeSelectorOpExists},
	{ScopeName: v1.ResourceQuotaScopePriorityClass, Operator: v1.ScopeSelectorOpDoesNotExist},
	{ScopeName: v1.ResourceQuotaScopePriorityClass, Operator: v1.ScopeSelectorOpIn, Values: []string{"high"}},
	{ScopeName: v1.ResourceQuotaScopePriorityClass, Operator: v1.ScopeSelectorOpNotIn, Values: []string{"high"}},
}

// Quantities in several formats and both internal forms (the last ones do not fit an int64
// amount), zero included.
var genQuantities = []string{"0", "1", "2", "100m", "250m", "1500m", "0.5", "3k", "1e3", "64Mi", "128Mi", "1Gi", "1G", "500M", "1n", "123456789012345678901234567890", "0.000000000001"}

var genNames = []v1.ResourceName{
	v1.ResourceCPU, v1.ResourceMemory, v1.ResourceEphemeralStorage, "hugepages-2Mi", "hugepages-1Gi",
	"example.com/gpu", "nvidia.com/gpu", deviceClassPrefix + "gpu", "kubernetes.io/native", v1.ResourcePods,
}

type podGen struct{ r *rand.Rand }

func (g podGen) pick(n int) int { return g.r.Intn(n) }
func (g podGen) maybe() bool    { return g.r.Intn(2) == 0 }

func (g podGen) list() v1.ResourceList {
	if g.pick(4) == 0 {
		return nil
	}
	out := v1.ResourceList{}
	for range g.pick(5) {
		out[genNames[g.pick(len(genNames))]] = resource.MustParse(genQuantities[g.pick(len(genQuantities))])
	}
	return out
}

func (g podGen) requirements() v1.ResourceRequirements {
	return v1.ResourceRequirements{Requests: g.list(), Limits: g.list()}
}

func (g podGen) containerStatus(name string) v1.ContainerStatus {
	cs := v1.ContainerStatus{Name: name}
	if g.maybe() {
		r := g.requirements()
		cs.Resources = &r
	}
	if g.maybe() {
		cs.AllocatedResources = g.list()
	}
	return cs
}

func (g podGen) affinity() *v1.Affinity {
	term := func() v1.PodAffinityTerm {
		t := v1.PodAffinityTerm{TopologyKey: "kubernetes.io/hostname", LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}
		switch g.pick(3) {
		case 0:
			t.Namespaces = []string{"other"}
		case 1:
			t.NamespaceSelector = &metav1.LabelSelector{}
		}
		return t
	}
	switch g.pick(5) {
	case 0:
		return nil
	case 1:
		return &v1.Affinity{NodeAffinity: &v1.NodeAffinity{}}
	case 2:
		return &v1.Affinity{PodAffinity: &v1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []v1.PodAffinityTerm{term()}}}
	case 3:
		return &v1.Affinity{PodAntiAffinity: &v1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []v1.WeightedPodAffinityTerm{{Weight: 1, PodAffinityTerm: term()}}}}
	}
	return &v1.Affinity{
		PodAffinity:     &v1.PodAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []v1.WeightedPodAffinityTerm{{Weight: 1, PodAffinityTerm: term()}}},
		PodAntiAffinity: &v1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []v1.PodAffinityTerm{term(), term()}},
	}
}

// pod generates a Pod: containers, init containers (some of them sidecars), overhead,
// pod-level resources, container and pod status resources with resize conditions, DRA
// node-allocatable claim resources, every phase and QoS class, deletion, deadlines, priority
// classes, affinity and an extended-resource claim.
func (g podGen) pod(i int) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{
		Namespace: "ns", Name: fmt.Sprintf("p%d", i), UID: types.UID(fmt.Sprintf("uid-%d", i)), ResourceVersion: fmt.Sprint(i),
		Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"a": "b"}, GenerateName: "p",
	}}
	always := v1.ContainerRestartPolicyAlways
	for j := range g.pick(4) {
		c := v1.Container{Name: fmt.Sprintf("c%d", j), Image: "img", Resources: g.requirements()}
		p.Spec.Containers = append(p.Spec.Containers, c)
		if g.maybe() {
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, g.containerStatus(c.Name))
		}
	}
	for j := range g.pick(4) {
		c := v1.Container{Name: fmt.Sprintf("i%d", j), Resources: g.requirements()}
		if g.maybe() {
			c.RestartPolicy = &always
		}
		p.Spec.InitContainers = append(p.Spec.InitContainers, c)
		if g.maybe() {
			p.Status.InitContainerStatuses = append(p.Status.InitContainerStatuses, g.containerStatus(c.Name))
		}
	}
	if g.pick(3) == 0 {
		p.Spec.Overhead = g.list()
	}
	if g.pick(3) == 0 {
		r := g.requirements()
		p.Spec.Resources = &r
		if g.maybe() {
			s := g.requirements()
			p.Status.Resources = &s
			p.Status.AllocatedResources = g.list()
		}
	}
	switch g.pick(4) {
	case 0:
		p.Status.Conditions = []v1.PodCondition{{Type: v1.PodResizePending, Status: v1.ConditionTrue, Reason: v1.PodReasonInfeasible}}
	case 1:
		p.Status.Conditions = []v1.PodCondition{{Type: v1.PodResizePending, Status: v1.ConditionTrue, Reason: v1.PodReasonDeferred}}
	case 2:
		p.Status.Conditions = []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}, {Type: v1.PodResizeInProgress, Status: v1.ConditionTrue}}
	}
	if g.pick(4) == 0 {
		p.Status.NodeAllocatableResourceClaimStatuses = []v1.NodeAllocatableResourceClaimStatus{{ResourceClaimName: "c", Resources: g.list()}}
	}
	p.Status.Phase = []v1.PodPhase{"", v1.PodPending, v1.PodRunning, v1.PodSucceeded, v1.PodFailed, v1.PodUnknown}[g.pick(6)]
	p.Status.QOSClass = []v1.PodQOSClass{"", v1.PodQOSBestEffort, v1.PodQOSBurstable, v1.PodQOSGuaranteed}[g.pick(4)]
	if g.pick(3) == 0 {
		ts := metav1.NewTime(podCacheEpoch)
		p.DeletionTimestamp = &ts
		if g.pick(4) != 0 {
			grace := int64(g.pick(3) * 30)
			p.DeletionGracePeriodSeconds = &grace
		}
	}
	if g.maybe() {
		d := []int64{-1, 0, 30}[g.pick(3)]
		p.Spec.ActiveDeadlineSeconds = &d
	}
	p.Spec.PriorityClassName = []string{"", "high", "low"}[g.pick(3)]
	p.Spec.Affinity = g.affinity()
	if g.pick(3) == 0 {
		p.Status.ExtendedResourceClaimStatus = &v1.PodExtendedResourceClaimStatus{ResourceClaimName: "claim"}
	}
	return p
}

// handPods are the cases the issue names, written out.
func handPods() []*v1.Pod {
	always := v1.ContainerRestartPolicyAlways
	sidecar := func(c v1.Container) v1.Container { c.RestartPolicy = &always; return c }
	qos := func(q v1.PodQOSClass) func(*v1.Pod) { return func(p *v1.Pod) { p.Status.QOSClass = q } }
	resize := func(reason string, actual, allocated v1.ResourceList) func(*v1.Pod) {
		return func(p *v1.Pod) {
			p.Status.Conditions = []v1.PodCondition{{Type: v1.PodResizePending, Status: v1.ConditionTrue, Reason: reason}}
			p.Status.ContainerStatuses = []v1.ContainerStatus{{Name: "a", Resources: &v1.ResourceRequirements{Requests: actual, Limits: actual}, AllocatedResources: allocated}}
		}
	}
	return []*v1.Pod{
		pod(qos(v1.PodQOSBestEffort), containers(container("a", nil, nil))),
		pod(qos(v1.PodQOSBurstable), containers(container("a", rl("cpu", "100m", "memory", "128Mi"), rl("memory", "256Mi")), container("b", rl("cpu", "100m", "memory", "128Mi"), rl("memory", "256Mi")))),
		pod(qos(v1.PodQOSBurstable), containers(container("a", rl("cpu", "1"), nil)), initContainers(container("i", rl("cpu", "2", "memory", "1Gi"), rl("cpu", "3")))),
		pod(qos(v1.PodQOSBurstable), containers(container("a", rl("cpu", "1"), rl("cpu", "2"))), initContainers(sidecar(container("s", rl("cpu", "500m"), rl("cpu", "1"))), container("i", rl("cpu", "2"), nil))),
		pod(qos(v1.PodQOSGuaranteed), containers(container("a", rl("cpu", "1", "memory", "1Gi"), rl("cpu", "1", "memory", "1Gi"))), func(p *v1.Pod) { p.Spec.Overhead = rl("cpu", "250m", "memory", "120Mi") }),
		pod(qos(v1.PodQOSBurstable), containers(container("a", rl("cpu", "1"), nil)), func(p *v1.Pod) {
			p.Spec.Resources = &v1.ResourceRequirements{Requests: rl("cpu", "2", "memory", "1Gi"), Limits: rl("memory", "2Gi")}
		}),
		pod(qos(v1.PodQOSBurstable), containers(container("a", rl("cpu", "2"), rl("cpu", "2"))), resize(v1.PodReasonInfeasible, rl("cpu", "1"), rl("cpu", "1"))),
		pod(qos(v1.PodQOSBurstable), containers(container("a", rl("cpu", "2"), rl("cpu", "2"))), resize(v1.PodReasonDeferred, rl("cpu", "1"), rl("cpu", "3"))),
		pod(qos(v1.PodQOSBurstable), containers(container("a", rl("cpu", "1", "example.com/gpu", "2", deviceClassPrefix+"gpu", "1"), rl("example.com/gpu", "2")))),
		pod(qos(v1.PodQOSGuaranteed), containers(container("a", rl("hugepages-2Mi", "64Mi", "memory", "1Gi", "cpu", "1"), rl("hugepages-2Mi", "64Mi", "memory", "1Gi", "cpu", "1")))),
		pod(qos(v1.PodQOSBurstable), phase(v1.PodSucceeded), containers(container("a", rl("cpu", "1"), nil))),
		pod(qos(v1.PodQOSBurstable), containers(container("a", rl("cpu", "1"), nil)), func(p *v1.Pod) {
			ts, grace := metav1.NewTime(podCacheEpoch), int64(30)
			p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &ts, &grace
		}),
		// No recorded QoS class: kept whole (trimmed), and must still agree.
		pod(containers(container("a", rl("cpu", "1"), nil))),
	}
}

func quantityKey(q resource.Quantity) string { return q.String() + "/" + string(q.Format) }

// usageKeys spells a usage list exactly: name, canonical value and format.
func usageKeys(l v1.ResourceList) []string {
	var out []string
	for n, q := range l {
		out = append(out, string(n)+"="+quantityKey(q))
	}
	slices.Sort(out)
	return out
}

// checkSameCharge fails unless full and cached are charged and scoped alike under charge.
// The whole Pod is measured afresh each time: resourcehelper adds overhead into the pod-level
// quantities it returns, which for a quantity held as an arbitrary-precision decimal writes
// through to the Pod itself. A compact Pod has neither and is measured as cached, again and
// again, which also shows that measuring it never changes it.
func checkSameCharge(t *testing.T, what string, whole, cached *v1.Pod, charge resourcehelper.PodResourcesOptions) {
	t.Helper()
	cached = fresh(cached)
	full := whole.DeepCopy()
	if cached.Namespace != full.Namespace || cached.Name != full.Name || cached.UID != full.UID {
		t.Fatalf("%s: identity %s/%s %s, want %s/%s %s", what, cached.Namespace, cached.Name, cached.UID, full.Namespace, full.Name, full.UID)
	}
	if extendedClaimName(cached) != extendedClaimName(full) {
		t.Fatalf("%s: extended claim %q, want %q", what, extendedClaimName(cached), extendedClaimName(full))
	}
	for _, s := range allScopes {
		if podMatchesScope(s, cached) != podMatchesScope(s, full) {
			t.Fatalf("%s: scope %v: %v, want %v", what, s, podMatchesScope(s, cached), podMatchesScope(s, full))
		}
	}
	ev := evaluatorFor(podsResource, charge, claimEvaluator{})
	for _, now := range []time.Time{
		podCacheEpoch.Add(-time.Hour), podCacheEpoch, podCacheEpoch.Add(30*time.Second - time.Nanosecond),
		podCacheEpoch.Add(30 * time.Second), podCacheEpoch.Add(30*time.Second + time.Nanosecond), podCacheEpoch.Add(time.Hour),
	} {
		full := whole.DeepCopy()
		want, wantAfter := podUsage(full, now, charge)
		got, gotAfter := podUsage(cached, now, charge)
		if !slices.Equal(usageKeys(got), usageKeys(want)) || gotAfter != wantAfter {
			t.Fatalf("%s at %s: usage %v (recheck %s), want %v (recheck %s)", what, now, usageKeys(got), gotAfter, usageKeys(want), wantAfter)
		}
		// Summed into a quota's status as the sync does, twice (the second sum starts
		// from a non-zero value), with every name measured.
		names := append([]v1.ResourceName{}, podComputeNames...)
		for n := range want {
			names = append(names, n)
		}
		wantSum, _ := calculate(ev, []any{whole.DeepCopy(), whole.DeepCopy()}, names, nil, now)
		gotSum, _ := calculate(ev, []any{cached, cached}, names, nil, now)
		if !slices.Equal(usageKeys(gotSum), usageKeys(wantSum)) {
			t.Fatalf("%s at %s: sum %v, want %v", what, now, usageKeys(gotSum), usageKeys(wantSum))
		}
	}
}

func compacted(p *v1.Pod) bool {
	return len(p.Spec.Containers) == 1 && p.Spec.Containers[0].Name == usageContainer
}

// fresh is p as cached if compacted, else a copy (see checkSameCharge).
func fresh(p *v1.Pod) *v1.Pod {
	if compacted(p) {
		return p
	}
	return p.DeepCopy()
}

func TestCompactPodChargedAsWhole(t *testing.T) {
	g := podGen{rand.New(rand.NewSource(1))}
	pods := handPods()
	n := 250
	if testing.Short() {
		n = 50
	}
	for i := range n {
		pods = append(pods, g.pod(i))
	}
	nCompacted := 0
	for ci, charge := range chargeVariants() {
		transform := podTransform(charge)
		cached := make([]*v1.Pod, len(pods))
		for i, p := range pods {
			obj, err := transform(p.DeepCopy())
			if err != nil {
				t.Fatal(err)
			}
			cached[i] = obj.(*v1.Pod)
			if compacted(cached[i]) {
				nCompacted++
			}
			checkSameCharge(t, fmt.Sprintf("charge %d, pod %d", ci, i), p, cached[i], charge)
			// A streamed list passes each object through the transform twice.
			again, err := transform(cached[i].DeepCopy())
			if err != nil {
				t.Fatal(err)
			}
			checkSameCharge(t, fmt.Sprintf("charge %d, pod %d transformed again", ci, i), p, again.(*v1.Pod), charge)
		}
		// An update is seen as changing usage alike whichever form either side is in.
		now := podCacheEpoch.Add(15 * time.Second)
		for i := 1; i < len(pods); i++ {
			a, b := pods[i-1], pods[i]
			want := podUsageChanged(a.DeepCopy(), b.DeepCopy(), now, charge)
			for _, pair := range [][2]*v1.Pod{{fresh(cached[i-1]), fresh(cached[i])}, {a.DeepCopy(), fresh(cached[i])}, {fresh(cached[i-1]), b.DeepCopy()}} {
				if got := podUsageChanged(pair[0], pair[1], now, charge); got != want {
					t.Fatalf("charge %d, pods %d -> %d: usage changed %v, want %v", ci, i-1, i, got, want)
				}
			}
			if podUsageChanged(fresh(cached[i]), pods[i].DeepCopy(), now, charge) {
				t.Fatalf("charge %d, pod %d: its compact form differs in usage from itself", ci, i)
			}
		}
	}
	// Most generated Pods have a QoS class and so are compacted; the check above must not
	// pass for want of any.
	if nCompacted < len(pods)*len(chargeVariants())/2 {
		t.Fatalf("only %d of %d Pods compacted", nCompacted, len(pods)*len(chargeVariants()))
	}
}

func TestPodTransformKeepsWhatCannotBeCompacted(t *testing.T) {
	p := pod(containers(container("a", rl("cpu", "1"), nil), container("b", rl("cpu", "1"), nil)))
	// No recorded QoS class: the BestEffort scope is worked out from the containers.
	obj, _ := podTransform(DefaultOptions().PodResources)(p.DeepCopy())
	if got := len(obj.(*v1.Pod).Spec.Containers); got != 2 {
		t.Fatalf("pod without a QoS class: %d containers cached, want both", got)
	}
	// Options under which one container's resources would not count as the totals.
	p.Status.QOSClass = v1.PodQOSBurstable
	for _, charge := range []resourcehelper.PodResourcesOptions{
		{SkipContainerLevelResources: true},
		{NonMissingContainerRequests: rl("cpu", "100m")},
	} {
		obj, _ := podTransform(charge)(p.DeepCopy())
		if got := len(obj.(*v1.Pod).Spec.Containers); got != 2 {
			t.Fatalf("charge %+v: %d containers cached, want both", charge, got)
		}
	}
}

func TestResourceListsShareEqualTotals(t *testing.T) {
	var lists resourceLists
	a := lists.intern(rl("cpu", "1", "memory", "1Gi"))
	b := lists.intern(rl("memory", "1Gi", "cpu", "1000m"))
	if fmt.Sprintf("%p", a) != fmt.Sprintf("%p", b) {
		t.Fatal("equal totals are not shared")
	}
	// Equal in value, written differently in a status: not shared.
	c := lists.intern(rl("cpu", "1", "memory", "1073741824"))
	if fmt.Sprintf("%p", a) == fmt.Sprintf("%p", c) {
		t.Fatal("totals of different formats are shared")
	}
	if lists.intern(v1.ResourceList{}) != nil {
		t.Fatal("an empty list is not nil")
	}
	for i := range maxResourceLists + 10 {
		lists.intern(rl("cpu", fmt.Sprint(i+2)))
	}
	if n := lists.shared.Len(); n > 2*maxResourceLists {
		t.Fatalf("%d lists kept, bound %d", n, 2*maxResourceLists)
	}
}

// A Pod kept whole with pod-level resources and an overhead, charged by concurrent syncs:
// its arbitrary-precision pod-level quantities must not be written to (run with -race), and
// every sync must see the same usage.
func TestPodUsageLeavesPodLevelQuantitiesAlone(t *testing.T) {
	huge := resource.MustParse("123456789012345678901234567890")
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"},
		Spec: v1.PodSpec{
			Containers: []v1.Container{{Name: "c"}},
			Resources:  &v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceMemory: huge}},
			Overhead:   v1.ResourceList{v1.ResourceMemory: resource.MustParse("1")},
		},
		Status: v1.PodStatus{Phase: v1.PodRunning},
	}
	before := pod.Spec.Resources.Requests[v1.ResourceMemory]
	want := before.String()
	var wg sync.WaitGroup
	got := make([]string, 8)
	for i := range got {
		wg.Go(func() {
			u, _ := podUsage(pod, time.Now(), resourcehelper.PodResourcesOptions{})
			q := u[v1.ResourceRequestsMemory]
			got[i] = q.String()
		})
	}
	wg.Wait()
	after := pod.Spec.Resources.Requests[v1.ResourceMemory]
	if after.String() != want {
		t.Fatalf("the cached Pod's pod-level request changed: %s, was %s", after.String(), want)
	}
	for _, g := range got[1:] {
		if g != got[0] {
			t.Fatalf("concurrent syncs saw different usage: %v", got)
		}
	}
}
