package quota

import (
	"fmt"
	"github.com/kcm-split/kcm-split/shared/features"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// ---- builders ----

func rl(kv ...string) v1.ResourceList {
	out := v1.ResourceList{}
	for i := 0; i+1 < len(kv); i += 2 {
		out[v1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

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

// checkUsage compares only the names in want, and that names absent from want with an
// explicit "-" are absent.
func checkUsage(t *testing.T, got v1.ResourceList, want map[string]string) {
	t.Helper()
	for name, w := range want {
		g, ok := got[v1.ResourceName(name)]
		if w == "-" {
			if ok {
				t.Errorf("%s = %s, want absent", name, g.String())
			}
			continue
		}
		if !ok {
			t.Errorf("%s absent, want %s", name, w)
			continue
		}
		if g.Cmp(resource.MustParse(w)) != 0 {
			t.Errorf("%s = %s, want %s", name, g.String(), w)
		}
	}
}

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

func TestServiceUsage(t *testing.T) {
	svc := func(typ v1.ServiceType, ports int, mut ...func(*v1.Service)) *v1.Service {
		s := &v1.Service{Spec: v1.ServiceSpec{Type: typ}}
		for i := range ports {
			s.Spec.Ports = append(s.Spec.Ports, v1.ServicePort{Port: int32(80 + i)})
		}
		for _, m := range mut {
			m(s)
		}
		return s
	}
	tests := []struct {
		name string
		svc  *v1.Service
		want map[string]string
	}{
		{"ClusterIP", svc(v1.ServiceTypeClusterIP, 2), map[string]string{"services": "1", "count/services": "1", "services.nodeports": "0", "services.loadbalancers": "0"}},
		{"NodePort", svc(v1.ServiceTypeNodePort, 3), map[string]string{"services.nodeports": "3", "services.loadbalancers": "0"}},
		{"LoadBalancer", svc(v1.ServiceTypeLoadBalancer, 2), map[string]string{"services.nodeports": "2", "services.loadbalancers": "1"}},
		{"LoadBalancer without node ports", svc(v1.ServiceTypeLoadBalancer, 3, func(s *v1.Service) {
			s.Spec.AllocateLoadBalancerNodePorts = new(false)
			s.Spec.Ports[1].NodePort = 30001
		}), map[string]string{"services.nodeports": "1", "services.loadbalancers": "1"}},
		{"ExternalName", svc(v1.ServiceTypeExternalName, 0), map[string]string{"services": "1", "services.nodeports": "0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { checkUsage(t, serviceUsage(tt.svc), tt.want) })
	}
	if !serviceUsageChanged(svc(v1.ServiceTypeLoadBalancer, 1), svc(v1.ServiceTypeClusterIP, 1)) {
		t.Error("a type change must replenish")
	}
	if serviceUsageChanged(svc(v1.ServiceTypeClusterIP, 1), svc(v1.ServiceTypeClusterIP, 1, func(s *v1.Service) { s.Labels = map[string]string{"a": "b"} })) {
		t.Error("a label change must not replenish")
	}
}

func TestPVCUsage(t *testing.T) {
	claim := func(mut ...func(*v1.PersistentVolumeClaim)) *v1.PersistentVolumeClaim {
		c := &v1.PersistentVolumeClaim{Spec: v1.PersistentVolumeClaimSpec{Resources: v1.VolumeResourceRequirements{Requests: rl("storage", "10Gi")}}}
		for _, m := range mut {
			m(c)
		}
		return c
	}
	gold := func(c *v1.PersistentVolumeClaim) { c.Spec.StorageClassName = new("gold") }
	tests := []struct {
		name string
		pvc  *v1.PersistentVolumeClaim
		want map[string]string
	}{
		{"no class", claim(), map[string]string{"persistentvolumeclaims": "1", "count/persistentvolumeclaims": "1", "requests.storage": "10Gi", "gold.storageclass.storage.k8s.io/requests.storage": "-"}},
		{"class field", claim(gold), map[string]string{"gold.storageclass.storage.k8s.io/requests.storage": "10Gi", "gold.storageclass.storage.k8s.io/persistentvolumeclaims": "1"}},
		{"beta annotation wins", claim(gold, func(c *v1.PersistentVolumeClaim) {
			c.Annotations = map[string]string{v1.BetaStorageClassAnnotation: "silver"}
		}), map[string]string{"silver.storageclass.storage.k8s.io/requests.storage": "10Gi", "gold.storageclass.storage.k8s.io/requests.storage": "-"}},
		{"fractional bytes round up", claim(func(c *v1.PersistentVolumeClaim) { c.Spec.Resources.Requests = rl("storage", "1500m") }), map[string]string{"requests.storage": "2"}},
		{"larger allocation counts", claim(func(c *v1.PersistentVolumeClaim) { c.Status.AllocatedResources = rl("storage", "20Gi") }), map[string]string{"requests.storage": "20Gi"}},
		{"smaller allocation does not", claim(func(c *v1.PersistentVolumeClaim) { c.Status.AllocatedResources = rl("storage", "5Gi") }), map[string]string{"requests.storage": "10Gi"}},
		{"no request", claim(func(c *v1.PersistentVolumeClaim) { c.Spec.Resources.Requests = nil }), map[string]string{"persistentvolumeclaims": "1", "requests.storage": "-"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { checkUsage(t, pvcUsage(tt.pvc), tt.want) })
	}
	vac := func(c *v1.PersistentVolumeClaim) { c.Spec.VolumeAttributesClassName = new("fast") }
	in := v1.ScopedResourceSelectorRequirement{ScopeName: v1.ResourceQuotaScopeVolumeAttributesClass, Operator: v1.ScopeSelectorOpIn, Values: []string{"fast"}}
	if !pvcMatchesScope(in, claim(vac)) || pvcMatchesScope(in, claim()) {
		t.Error("VolumeAttributesClass In")
	}
	if !pvcUsageChanged(claim(), claim(func(c *v1.PersistentVolumeClaim) { c.Status.AllocatedResources = rl("storage", "20Gi") })) {
		t.Error("an expansion must replenish")
	}
}

func TestResourceFor(t *testing.T) {
	tests := []struct {
		name string
		gr   schema.GroupResource
		ok   bool
	}{
		{"pods", podsResource, true},
		{"requests.cpu", podsResource, true},
		{"limits.memory", podsResource, true},
		{"requests.hugepages-1Gi", podsResource, true},
		{"requests.example.com/gpu", podsResource, true},
		{"requests.kubernetes.io/foo", schema.GroupResource{}, false},
		{"count/pods", podsResource, true},
		{"services.nodeports", servicesResource, true},
		{"count/services", servicesResource, true},
		{"requests.storage", pvcsResource, true},
		{"gold.storageclass.storage.k8s.io/persistentvolumeclaims", pvcsResource, true},
		{"configmaps", schema.GroupResource{Resource: "configmaps"}, true},
		{"resourcequotas", schema.GroupResource{Resource: "resourcequotas"}, true},
		{"count/configmaps", schema.GroupResource{Resource: "configmaps"}, true},
		{"count/deployments.apps", schema.GroupResource{Group: "apps", Resource: "deployments"}, true},
		{"count/widgets.kcm-split.example.com", schema.GroupResource{Group: "kcm-split.example.com", Resource: "widgets"}, true},
		{"count/", schema.GroupResource{}, false},
		// Upstream never counts Events, nor virtual types.
		{"count/events", schema.GroupResource{}, false},
		{"count/events.events.k8s.io", schema.GroupResource{}, false},
		{"count/tokenreviews.authentication.k8s.io", schema.GroupResource{}, false},
		{"example.com/unknown", schema.GroupResource{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gr, ok := resourceFor(v1.ResourceName(tt.name), DefaultOptions().Claims)
			if ok != tt.ok || gr != tt.gr {
				t.Fatalf("got %v %v, want %v %v", gr, ok, tt.gr, tt.ok)
			}
			if ok && gr != podsResource && gr != servicesResource && gr != pvcsResource && tt.name[:6] == "count/" && countName(gr) != v1.ResourceName(tt.name) {
				t.Fatalf("countName(%v) = %s", gr, countName(gr))
			}
		})
	}
}

// Only types that can be created, listed, watched and deleted are counted, as upstream.
func TestQuotable(t *testing.T) {
	all := []string{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}
	for _, tc := range []struct {
		group string
		r     metav1.APIResource
		want  bool
	}{
		{"", metav1.APIResource{Name: "configmaps", Verbs: all}, true},
		{"apps", metav1.APIResource{Name: "deployments", Verbs: all}, true},
		{"apps", metav1.APIResource{Name: "deployments/scale", Verbs: all}, false},
		{"", metav1.APIResource{Name: "events", Verbs: all}, false},
		{"events.k8s.io", metav1.APIResource{Name: "events", Verbs: all}, false},
		{"example.com", metav1.APIResource{Name: "readonly", Verbs: []string{"get", "list", "watch"}}, false},
		{"example.com", metav1.APIResource{Name: "undeletable", Verbs: []string{"create", "get", "list", "watch"}}, false},
		{"example.com", metav1.APIResource{Name: "unwatchable", Verbs: []string{"create", "delete", "list"}}, false},
		{"", metav1.APIResource{Name: "bindings", Verbs: []string{"create"}}, false},
	} {
		if got := quotable(tc.group, tc.r); got != tc.want {
			t.Errorf("quotable(%q, %s %v) = %t, want %t", tc.group, tc.r.Name, tc.r.Verbs, got, tc.want)
		}
	}
}

func TestCalculateScopesAndMerge(t *testing.T) {
	now := time.Now()
	pods := []any{
		pod(containers(container("a", rl("cpu", "1"), nil))),
		pod(containers(container("a", rl("cpu", "2"), nil)), func(p *v1.Pod) { p.Spec.ActiveDeadlineSeconds = new(int64(5)) }),
		pod(containers(container("a", nil, nil))),
		pod(containers(container("a", rl("cpu", "4"), nil)), phase(v1.PodFailed)),
	}
	names := []v1.ResourceName{"pods", "requests.cpu", "count/pods"}
	ev := evaluatorFor(podsResource, DefaultOptions().PodResources, claimEvaluator{})
	used, _ := calculate(ev, pods, names, nil, now)
	checkUsage(t, used, map[string]string{"pods": "3", "requests.cpu": "3", "count/pods": "4"})

	spec := v1.ResourceQuotaSpec{
		Scopes: []v1.ResourceQuotaScope{v1.ResourceQuotaScopeNotTerminating},
		ScopeSelector: &v1.ScopeSelector{MatchExpressions: []v1.ScopedResourceSelectorRequirement{
			{ScopeName: v1.ResourceQuotaScopeNotBestEffort, Operator: v1.ScopeSelectorOpExists},
		}},
	}
	used, _ = calculate(ev, pods, names, scopeRequirements(&spec), now)
	checkUsage(t, used, map[string]string{"pods": "1", "requests.cpu": "1", "count/pods": "2"})

	// A type without scopes counts nothing under a scoped quota.
	used, _ = calculate(evaluatorFor(schema.GroupResource{Resource: "configmaps"}, DefaultOptions().PodResources, claimEvaluator{}), []any{&metav1.PartialObjectMetadata{}}, []v1.ResourceName{"configmaps"}, scopeRequirements(&spec), now)
	checkUsage(t, used, map[string]string{"configmaps": "0"})
	used, _ = calculate(evaluatorFor(schema.GroupResource{Resource: "configmaps"}, DefaultOptions().PodResources, claimEvaluator{}), []any{&metav1.PartialObjectMetadata{}, &metav1.PartialObjectMetadata{}}, []v1.ResourceName{"configmaps", "count/configmaps"}, nil, now)
	checkUsage(t, used, map[string]string{"configmaps": "2", "count/configmaps": "2"})

	rq := &v1.ResourceQuota{
		Spec: v1.ResourceQuotaSpec{Hard: rl("pods", "10", "count/widgets.example.com", "5")},
		Status: v1.ResourceQuotaStatus{
			Hard: rl("pods", "10", "count/widgets.example.com", "5", "secrets", "1"),
			Used: rl("pods", "7", "count/widgets.example.com", "3", "secrets", "1"),
		},
	}
	st := desiredStatus(rq, rl("pods", "2"))
	checkUsage(t, st.Used, map[string]string{"pods": "2", "count/widgets.example.com": "3", "secrets": "-"})
	if !statusChanged(rq, st) {
		t.Fatal("changed status not seen as changed")
	}
	rq.Status = v1.ResourceQuotaStatus{Hard: rl("pods", "10", "count/widgets.example.com", "5"), Used: rl("pods", "2", "count/widgets.example.com", "3")}
	if statusChanged(rq, desiredStatus(rq, rl("pods", "2000m"))) {
		t.Fatal("the same quantity in other units seen as a change")
	}
}

func TestNeedsPriority(t *testing.T) {
	rq := func(hard, shard, used v1.ResourceList) *v1.ResourceQuota {
		return &v1.ResourceQuota{Spec: v1.ResourceQuotaSpec{Hard: hard}, Status: v1.ResourceQuotaStatus{Hard: shard, Used: used}}
	}
	if !needsPriority(rq(rl("pods", "1"), nil, nil), DefaultOptions().Claims) {
		t.Error("new quota")
	}
	if !needsPriority(rq(rl("pods", "2"), rl("pods", "1"), rl("pods", "0")), DefaultOptions().Claims) {
		t.Error("hard changed")
	}
	if !needsPriority(rq(rl("pods", "1", "secrets", "1"), rl("pods", "1", "secrets", "1"), rl("pods", "0")), DefaultOptions().Claims) {
		t.Error("used missing")
	}
	if needsPriority(rq(rl("pods", "1", "example.com/x", "1"), rl("pods", "1", "example.com/x", "1"), rl("pods", "0")), DefaultOptions().Claims) {
		t.Error("a name nobody measures cannot need priority")
	}
	if needsPriority(rq(rl("pods", "1"), rl("pods", "1"), rl("pods", "0")), DefaultOptions().Claims) {
		t.Error("synced quota")
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
