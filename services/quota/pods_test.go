package quota

import (
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcm-split/kcm-split/shared/features"
)

func container(name string, req, lim v1.ResourceList) v1.Container {
	return v1.Container{Name: name, Resources: v1.ResourceRequirements{Requests: req, Limits: lim}}
}

func pod(opts ...func(*v1.Pod)) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}, Status: v1.PodStatus{Phase: v1.PodRunning}}
	for _, o := range opts {
		o(p)
	}
	return p
}

func containers(cs ...v1.Container) func(*v1.Pod) {
	return func(p *v1.Pod) { p.Spec.Containers = append(p.Spec.Containers, cs...) }
}

func initContainers(cs ...v1.Container) func(*v1.Pod) {
	return func(p *v1.Pod) { p.Spec.InitContainers = append(p.Spec.InitContainers, cs...) }
}

func phase(ph v1.PodPhase) func(*v1.Pod) { return func(p *v1.Pod) { p.Status.Phase = ph } }

// Over 80 lines: one table of cases, each a few lines; splitting it would scatter the cases.
func TestPodUsage(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	always := v1.ContainerRestartPolicyAlways
	tests := []struct {
		name    string
		pod     *v1.Pod
		want    map[string]string
		recheck time.Duration
	}{
		{
			name: "requests and limits of every container add up, in mixed units",
			pod: pod(containers(
				container("a", rl("cpu", "500m", "memory", "1Gi", "ephemeral-storage", "1G"), rl("cpu", "1", "memory", "1Gi")),
				container("b", rl("cpu", "0.25", "memory", "512Mi"), rl("cpu", "250m", "memory", "536870912")),
			)),
			want: map[string]string{
				"pods": "1", "count/pods": "1",
				"cpu": "750m", "requests.cpu": "750m", "limits.cpu": "1250m",
				"memory": "1536Mi", "requests.memory": "1536Mi", "limits.memory": "1536Mi",
				"ephemeral-storage": "1G", "requests.ephemeral-storage": "1G", "limits.ephemeral-storage": "-",
			},
		},
		{
			name: "init containers count at their peak, not summed; overhead is added",
			pod: pod(
				containers(container("a", rl("cpu", "100m", "memory", "100Mi"), nil)),
				initContainers(container("i1", rl("cpu", "1", "memory", "10Mi"), nil), container("i2", rl("cpu", "200m", "memory", "1Gi"), nil)),
				func(p *v1.Pod) { p.Spec.Overhead = rl("cpu", "10m", "memory", "1Mi") },
			),
			want: map[string]string{"requests.cpu": "1010m", "requests.memory": "1025Mi"},
		},
		{
			name: "sidecars (restartable init containers) run alongside the app containers",
			pod: pod(
				containers(container("a", rl("cpu", "100m"), nil)),
				initContainers(func() v1.Container {
					c := container("side", rl("cpu", "50m"), nil)
					c.RestartPolicy = &always
					return c
				}()),
			),
			want: map[string]string{"requests.cpu": "150m"},
		},
		{
			name: "pod-level resources win over containers",
			pod: pod(
				containers(container("a", rl("cpu", "100m", "memory", "100Mi"), nil)),
				func(p *v1.Pod) {
					p.Spec.Resources = &v1.ResourceRequirements{Requests: rl("cpu", "2", "memory", "1Gi"), Limits: rl("cpu", "3", "memory", "2Gi")}
				},
			),
			want: map[string]string{"requests.cpu": "2", "limits.cpu": "3", "limits.memory": "2Gi"},
		},
		{
			name: "hugepages and extended resources",
			pod: pod(containers(container("a",
				rl("hugepages-2Mi", "4Mi", "example.com/gpu", "2", "deviceclass.resource.kubernetes.io/gpu.example.com", "1"),
				rl("hugepages-2Mi", "4Mi", "example.com/gpu", "2")))),
			want: map[string]string{
				"hugepages-2Mi": "4Mi", "requests.hugepages-2Mi": "4Mi",
				"requests.example.com/gpu": "2", "example.com/gpu": "-",
				"requests.deviceclass.resource.kubernetes.io/gpu.example.com": "1",
			},
		},
		{
			name: "a resize the kubelet allocated above the spec counts the allocation",
			pod: pod(containers(container("a", rl("cpu", "100m"), nil)), func(p *v1.Pod) {
				p.Status.ContainerStatuses = []v1.ContainerStatus{{
					Name: "a", AllocatedResources: rl("cpu", "300m"),
					Resources: &v1.ResourceRequirements{Requests: rl("cpu", "300m")},
				}}
			}),
			want: map[string]string{"requests.cpu": "300m"},
		},
		{
			name: "Succeeded is free except for count/pods",
			pod:  pod(containers(container("a", rl("cpu", "1"), nil)), phase(v1.PodSucceeded)),
			want: map[string]string{"count/pods": "1", "pods": "-", "requests.cpu": "-"},
		},
		{
			name: "Failed is free except for count/pods",
			pod:  pod(containers(container("a", rl("cpu", "1"), nil)), phase(v1.PodFailed)),
			want: map[string]string{"count/pods": "1", "pods": "-", "requests.cpu": "-"},
		},
		{
			name: "deleting within its grace period is charged, and rechecked when it ends",
			pod: pod(containers(container("a", rl("cpu", "1"), nil)), func(p *v1.Pod) {
				p.DeletionTimestamp = &metav1.Time{Time: now.Add(-10 * time.Second)}
				p.DeletionGracePeriodSeconds = new(int64(30))
			}),
			want:    map[string]string{"pods": "1", "requests.cpu": "1"},
			recheck: 20*time.Second + time.Nanosecond,
		},
		{
			name: "deleting past its grace period (a lost node) is free",
			pod: pod(containers(container("a", rl("cpu", "1"), nil)), func(p *v1.Pod) {
				p.DeletionTimestamp = &metav1.Time{Time: now.Add(-31 * time.Second)}
				p.DeletionGracePeriodSeconds = new(int64(30))
			}),
			want: map[string]string{"count/pods": "1", "pods": "-", "requests.cpu": "-"},
		},
		{
			name: "Pending is charged",
			pod:  pod(containers(container("a", rl("memory", "1Gi"), nil)), phase(v1.PodPending)),
			want: map[string]string{"pods": "1", "memory": "1Gi"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, recheck := podUsage(tt.pod, now, DefaultOptions().PodResources)
			checkUsage(t, got, tt.want)
			if recheck != tt.recheck {
				t.Errorf("recheck = %v, want %v", recheck, tt.recheck)
			}
		})
	}
}

// --feature-gates=PodLevelResources=false charges a Pod what its containers ask, ignoring
// spec.resources, as upstream's evaluator does with the gate off; the default charges
// spec.resources.
func TestPodLevelResourcesGate(t *testing.T) {
	now := time.Now()
	p := pod(
		containers(container("a", rl("cpu", "100m", "memory", "100Mi"), rl("cpu", "200m"))),
		func(p *v1.Pod) {
			p.Spec.Resources = &v1.ResourceRequirements{Requests: rl("cpu", "2", "memory", "1Gi"), Limits: rl("cpu", "3", "memory", "2Gi")}
		},
	)
	for _, tc := range []struct {
		gates []string
		want  map[string]string
	}{
		{nil, map[string]string{"requests.cpu": "2", "requests.memory": "1Gi", "limits.cpu": "3", "limits.memory": "2Gi"}},
		{[]string{"PodLevelResources=true"}, map[string]string{"requests.cpu": "2", "limits.cpu": "3"}},
		{[]string{"PodLevelResources=false"}, map[string]string{"requests.cpu": "100m", "requests.memory": "100Mi", "limits.cpu": "200m", "limits.memory": "-"}},
	} {
		t.Run(fmt.Sprint(tc.gates), func(t *testing.T) {
			gates, err := features.Parse(tc.gates)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := podUsage(p, now, PodResources(gates))
			checkUsage(t, got, tc.want)
		})
	}
}

func TestPodScopes(t *testing.T) {
	deadline := func(p *v1.Pod) { p.Spec.ActiveDeadlineSeconds = new(int64(60)) }
	besteffort := pod(containers(container("a", nil, nil)))
	burstable := pod(containers(container("a", rl("cpu", "100m"), nil)))
	zeroOnly := pod(containers(container("a", rl("cpu", "0"), nil)))
	recorded := pod(containers(container("a", rl("cpu", "1"), nil)), func(p *v1.Pod) { p.Status.QOSClass = v1.PodQOSBestEffort })
	prio := pod(func(p *v1.Pod) { p.Spec.PriorityClassName = "high" })
	cross := pod(func(p *v1.Pod) {
		p.Spec.Affinity = &v1.Affinity{PodAntiAffinity: &v1.PodAntiAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: []v1.WeightedPodAffinityTerm{{PodAffinityTerm: v1.PodAffinityTerm{NamespaceSelector: &metav1.LabelSelector{}}}},
		}}
	})
	sameNS := pod(func(p *v1.Pod) {
		p.Spec.Affinity = &v1.Affinity{PodAffinity: &v1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []v1.PodAffinityTerm{{TopologyKey: "zone"}}}}
	})
	exists := func(s v1.ResourceQuotaScope) v1.ScopedResourceSelectorRequirement {
		return v1.ScopedResourceSelectorRequirement{ScopeName: s, Operator: v1.ScopeSelectorOpExists}
	}
	pc := func(op v1.ScopeSelectorOperator, values ...string) v1.ScopedResourceSelectorRequirement {
		return v1.ScopedResourceSelectorRequirement{ScopeName: v1.ResourceQuotaScopePriorityClass, Operator: op, Values: values}
	}
	tests := []struct {
		name string
		sel  v1.ScopedResourceSelectorRequirement
		pod  *v1.Pod
		want bool
	}{
		{"Terminating with deadline", exists(v1.ResourceQuotaScopeTerminating), pod(deadline), true},
		{"Terminating without", exists(v1.ResourceQuotaScopeTerminating), pod(), false},
		{"NotTerminating without", exists(v1.ResourceQuotaScopeNotTerminating), pod(), true},
		{"NotTerminating with deadline", exists(v1.ResourceQuotaScopeNotTerminating), pod(deadline), false},
		{"BestEffort no resources", exists(v1.ResourceQuotaScopeBestEffort), besteffort, true},
		{"BestEffort zero request is still best effort", exists(v1.ResourceQuotaScopeBestEffort), zeroOnly, true},
		{"BestEffort burstable", exists(v1.ResourceQuotaScopeBestEffort), burstable, false},
		{"BestEffort recorded QoS wins", exists(v1.ResourceQuotaScopeBestEffort), recorded, true},
		{"NotBestEffort burstable", exists(v1.ResourceQuotaScopeNotBestEffort), burstable, true},
		{"NotBestEffort best effort", exists(v1.ResourceQuotaScopeNotBestEffort), besteffort, false},
		{"PriorityClass Exists with one", pc(v1.ScopeSelectorOpExists), prio, true},
		{"PriorityClass Exists without", pc(v1.ScopeSelectorOpExists), pod(), false},
		{"PriorityClass DoesNotExist without", pc(v1.ScopeSelectorOpDoesNotExist), pod(), true},
		{"PriorityClass DoesNotExist with one", pc(v1.ScopeSelectorOpDoesNotExist), prio, false},
		{"PriorityClass In", pc(v1.ScopeSelectorOpIn, "low", "high"), prio, true},
		{"PriorityClass In other", pc(v1.ScopeSelectorOpIn, "low"), prio, false},
		{"PriorityClass In without", pc(v1.ScopeSelectorOpIn, "low"), pod(), false},
		{"PriorityClass NotIn", pc(v1.ScopeSelectorOpNotIn, "low"), prio, true},
		{"PriorityClass NotIn listed", pc(v1.ScopeSelectorOpNotIn, "high"), prio, false},
		{"PriorityClass NotIn without", pc(v1.ScopeSelectorOpNotIn, "high"), pod(), true},
		{"CrossNamespacePodAffinity selector", exists(v1.ResourceQuotaScopeCrossNamespacePodAffinity), cross, true},
		{"CrossNamespacePodAffinity same namespace", exists(v1.ResourceQuotaScopeCrossNamespacePodAffinity), sameNS, false},
		{"CrossNamespacePodAffinity none", exists(v1.ResourceQuotaScopeCrossNamespacePodAffinity), pod(), false},
		{"unknown scope", exists("Nonsense"), pod(), false},
		{"VolumeAttributesClass does not apply to pods", exists(v1.ResourceQuotaScopeVolumeAttributesClass), pod(), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := podMatchesScope(tt.sel, tt.pod); got != tt.want {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestPodUsageChanged(t *testing.T) {
	now := time.Now()
	base := func() *v1.Pod { return pod(containers(container("a", rl("cpu", "1"), nil))) }
	failed := base()
	failed.Status.Phase = v1.PodFailed
	relabeled := base()
	relabeled.Labels = map[string]string{"x": "y"}
	deleting := base()
	deleting.DeletionTimestamp = &metav1.Time{Time: now}
	deleting.DeletionGracePeriodSeconds = new(int64(30))
	resized := base()
	resized.Status.ContainerStatuses = []v1.ContainerStatus{{Name: "a", Resources: &v1.ResourceRequirements{Requests: rl("cpu", "2")}, AllocatedResources: rl("cpu", "2")}}
	for _, tt := range []struct {
		name string
		cur  *v1.Pod
		want bool
	}{{"turning Failed", failed, true}, {"a label", relabeled, false}, {"deletion starts", deleting, true}, {"resized", resized, true}} {
		if got := podUsageChanged(base(), tt.cur, now, DefaultOptions().PodResources); got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, got, tt.want)
		}
	}
}
