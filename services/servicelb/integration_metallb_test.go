package servicelb_test

// MetalLB's API as a pool source (--pool-api=metallb), on the real apiserver with MetalLB's
// IPAddressPool CRD installed from its module (config/crd/bases of go.universe.tf/metallb
// v0.15.2): selection, annotations old and new, sharing, one pool per Service, and a missing
// CRD that releases nothing.

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	mlb "go.universe.tf/metallb/api/v1beta1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/kcm-split/kcm-split/services/servicelb"
	"github.com/kcm-split/kcm-split/services/servicelb/allocation"
	"github.com/kcm-split/kcm-split/services/servicelb/api/v1alpha1"
	"github.com/kcm-split/kcm-split/services/servicelb/poolsource"
	"github.com/kcm-split/kcm-split/shared/testenv"
)

const metalLBCRDName = "ipaddresspools.metallb.io"

// metalLBCRD returns MetalLB's IPAddressPool CRD as its module ships it.
func metalLBCRD(t *testing.T) map[string]any {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "go.universe.tf/metallb").Output()
	if err != nil {
		t.Fatalf("locating the go.universe.tf/metallb module: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "config", "crd", "bases", "metallb.io_ipaddresspools.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := yaml.Unmarshal(b, &obj); err != nil {
		t.Fatal(err)
	}
	return obj
}

// installMetalLBCRD creates MetalLB's IPAddressPool CRD (if missing) and waits until it is served.
func installMetalLBCRD(t *testing.T) {
	t.Helper()
	if err := testenv.InstallCRD(env.Config, poolsource.MetalLBGroupVersionResource, metalLBCRD(t)); err != nil {
		t.Fatal(err)
	}
}

// deleteMetalLBCRD deletes MetalLB's CRD (and every MetalLB pool) and waits until it is gone.
func deleteMetalLBCRD(t *testing.T) {
	t.Helper()
	if err := testenv.DeleteCRD(env.Config, metalLBCRDName); err != nil {
		t.Fatal(err)
	}
}

func dynClient(t *testing.T) dynamic.Interface {
	t.Helper()
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	return dyn
}

// metalPool creates a MetalLB pool named <ns>-<name>, allocated to the test's namespace only
// unless mut changes it; it is deleted when the test ends.
func (f *fixture) metalPool(name string, addresses []string, mut ...func(*mlb.IPAddressPoolSpec)) string {
	f.t.Helper()
	p := &mlb.IPAddressPool{
		TypeMeta:   metav1.TypeMeta{APIVersion: mlb.GroupVersion.String(), Kind: "IPAddressPool"},
		ObjectMeta: metav1.ObjectMeta{Name: f.ns + "-" + name, Namespace: "metallb-system"},
		Spec:       mlb.IPAddressPoolSpec{Addresses: addresses, AllocateTo: &mlb.ServiceAllocation{Namespaces: []string{f.ns}}},
	}
	for _, m := range mut {
		m(&p.Spec)
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(p)
	if err != nil {
		f.t.Fatal(err)
	}
	res := dynClient(f.t).Resource(poolsource.MetalLBGroupVersionResource).Namespace("metallb-system")
	if _, err := res.Create(context.Background(), &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil {
		f.t.Fatalf("creating MetalLB pool %s: %v", p.Name, err)
	}
	f.t.Cleanup(func() { _ = res.Delete(context.Background(), p.Name, metav1.DeleteOptions{}) })
	return p.Name
}

// metalPoolStatus reads a MetalLB pool's status.
func (f *fixture) metalPoolStatus(name string) mlb.IPAddressPoolStatus {
	f.t.Helper()
	u, err := dynClient(f.t).Resource(poolsource.MetalLBGroupVersionResource).Namespace("metallb-system").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	var p mlb.IPAddressPool
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p); err != nil {
		f.t.Fatal(err)
	}
	return p.Status
}

// metallbNamespace makes sure MetalLB's namespace exists (its pools are namespaced).
func metallbNamespace(t *testing.T) {
	t.Helper()
	_, err := env.Client(t).CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "metallb-system"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

func svcLabel(k, v string) svcOpt {
	return func(s *corev1.Service) {
		if s.Labels == nil {
			s.Labels = map[string]string{}
		}
		s.Labels[k] = v
	}
}

func (f *fixture) wantIPs(name string, want ...string) {
	f.t.Helper()
	s := f.wait(name, "got "+strings.Join(want, ","), func(s *corev1.Service) bool { return s != nil && len(s.Status.LoadBalancer.Ingress) > 0 })
	if got := ingressIPs(s); !slices.Equal(got, want) {
		f.t.Fatalf("%s got %v, want %v", name, got, want)
	}
	for _, in := range s.Status.LoadBalancer.Ingress {
		if in.IPMode == nil || *in.IPMode != corev1.LoadBalancerIPModeVIP {
			f.t.Fatalf("%s: ipMode %v, want VIP", name, in.IPMode)
		}
	}
}

// TestMetalLBCRDMissing: with --pool-api=metallb and no MetalLB CRD, an address a Service
// shows (from MetalLB's controller, say) is kept, unverified, and nothing is handed out; once
// the CRD and a pool containing it appear, it is verified in place and new Services are
// served.
func TestMetalLBCRDMissing(t *testing.T) {
	testenv.Require(t, env)
	deleteMetalLBCRD(t)
	// A class of its own: Services other tests leave behind (finalizer, address, namespace
	// going away) are none of this controller's business, so the unverified count is ours.
	const cls = "kcm-split.io/metallb-test"
	args := []string{"--pool-api=metallb", "--load-balancer-class=" + cls}
	f := setup(t, args...)
	// A Service that MetalLB's controller served before the switch: it has its address before
	// this controller first sees it (a running controller would write the Service first).
	if !f.ctrl.Stop(30 * time.Second) {
		t.Fatal("the controller did not stop on SIGTERM")
	}
	s := f.service("old", class(cls))
	s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: f.v4(7)}}
	if _, err := f.c.CoreV1().Services(f.ns).UpdateStatus(context.Background(), s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.ctrl = env.StartLeading(t, controller, "ctrl2", args...)
	f.waitEvent("old", servicelb.ReasonAddressUnverified)
	f.service("new", class(cls))
	f.waitEvent("new", servicelb.ReasonAllocationFailed)
	if v := f.metricSum("kcm_split_servicelb_pending_services", `api="metallb"`, `reason="PoolAPIUnavailable"`); v != 1 {
		t.Errorf("pending for want of the pool API = %v, want 1", v)
	}
	if v := f.metricSum("kcm_split_servicelb_unverified_addresses", `api="metallb"`, `pool=""`); v != 1 {
		t.Errorf("unverified addresses = %v, want 1", v)
	}
	if got := ingressIPs(f.wait("old", "kept", func(s *corev1.Service) bool { return s != nil })); !slices.Equal(got, []string{f.v4(7)}) {
		t.Fatalf("old shows %v while the pool API is missing, want [%s]", got, f.v4(7))
	}
	start := time.Now()
	installMetalLBCRD(t)
	metallbNamespace(t)
	f.metalPool("main", []string{f.v4(0) + "/28"})
	f.wantIPs("new", f.v4(0))
	t.Logf("a new Service was served %s after the CRD was installed", time.Since(start).Round(time.Millisecond))
	f.waitUnverified("pool appeared", 0)
	f.wantIPs("old", f.v4(7))
}

// TestMetalLBSelection: MetalLB's pool choice (priority, namespaces, namespace and service
// selectors, autoAssign, avoidBuggyIPs) and its annotations, current and legacy.
// Over 80 lines: the selection rules share one cluster set-up, checked one after the other.
func TestMetalLBSelection(t *testing.T) {
	testenv.Require(t, env)
	installMetalLBCRD(t)
	metallbNamespace(t)
	f := setup(t, "--pool-api=metallb")
	// low: priority 2, one usable address (.0 is avoided). web: priority 1, for Services
	// labelled app=web only. manual: no automatic assignment. labelled: for namespaces
	// labelled <ns>=yes and Services labelled app=e.
	f.metalPool("low", []string{f.v4(0) + "/31"}, func(s *mlb.IPAddressPoolSpec) {
		s.AvoidBuggyIPs = true
		s.AllocateTo.Priority = 2
	})
	f.metalPool("web", []string{f.v4(16) + "/30"}, func(s *mlb.IPAddressPoolSpec) {
		s.AllocateTo.Priority = 1
		s.AllocateTo.ServiceSelectors = []metav1.LabelSelector{{MatchLabels: map[string]string{"app": "web"}}}
	})
	manual := f.metalPool("manual", []string{f.v4(32) + "-" + f.v4(40)}, func(s *mlb.IPAddressPoolSpec) { s.AutoAssign = ptr.To(false) })
	labelled := f.metalPool("labelled", []string{f.v4(48) + "/30"}, func(s *mlb.IPAddressPoolSpec) {
		s.AllocateTo = &mlb.ServiceAllocation{
			NamespaceSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{f.ns: "yes"}}},
			ServiceSelectors:   []metav1.LabelSelector{{MatchLabels: map[string]string{"app": "e"}}},
		}
	})

	f.service("web", svcLabel("app", "web"))
	f.wantIPs("web", f.v4(16)) // priority 1 before 2
	f.service("plain")
	f.wantIPs("plain", f.v4(1)) // web's selector does not match; .0 avoided
	f.service("plain2")
	msg := f.waitEvent("plain2", servicelb.ReasonAllocationFailed) // manual does not auto-assign
	if !strings.Contains(msg, "no address available") {
		t.Fatalf("plain2: %q", msg)
	}
	f.service("named", annotate(poolsource.AnnotationMetalLBAddressPool, manual))
	f.wantIPs("named", f.v4(32))
	f.service("named-legacy", annotate(poolsource.LegacyAnnotationMetalLBAddressPool, manual))
	f.wantIPs("named-legacy", f.v4(33))
	f.service("ip", annotate(poolsource.AnnotationMetalLBLoadBalancerIPs, f.v4(38)))
	f.wantIPs("ip", f.v4(38))
	f.service("ip-legacy", annotate(poolsource.LegacyAnnotationMetalLBLBIPs, f.v4(39)))
	f.wantIPs("ip-legacy", f.v4(39))
	// An address outside the pool the Service names is refused, as MetalLB does.
	f.service("ip-wrong-pool", annotate(poolsource.AnnotationMetalLBLoadBalancerIPs, f.v4(40)), annotate(poolsource.AnnotationMetalLBAddressPool, f.ns+"-low"))
	f.waitEvent("ip-wrong-pool", servicelb.ReasonAllocationFailed)
	// kcm-split's own annotation is not read with --pool-api=metallb.
	f.service("own", annotate(poolsource.AnnotationAddressPool, manual))
	f.waitEvent("own", servicelb.ReasonAllocationFailed)

	// The labelled pool admits app=e only once the namespace carries the label.
	f.service("e", svcLabel("app", "e"), annotate(poolsource.AnnotationMetalLBAddressPool, labelled))
	f.waitEvent("e", servicelb.ReasonAllocationFailed)
	// The pending gauge says which pool each waits for and why.
	for _, c := range []struct {
		labels []string
		want   float64
	}{
		{[]string{`api="metallb"`, `pool=""`, `reason="PoolExhausted"`}, 2}, // plain2, own
		{[]string{`pool="` + f.ns + `-low"`, `reason="RequestedIPNotInPool"`}, 1},
		{[]string{`pool="` + labelled + `"`, `reason="NoMatchingPool"`}, 1},
		{[]string{`api="metallb"`, `family="IPv4"`, `pool="` + manual + `"`}, 4},
	} {
		name := "kcm_split_servicelb_pending_services"
		if strings.Contains(strings.Join(c.labels, ","), "family") {
			name = "kcm_split_servicelb_addresses_assigned"
		}
		err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			return f.metricSum(name, c.labels...) == c.want, nil
		})
		if err != nil {
			t.Errorf("%s%v = %v, want %v", name, c.labels, f.metricSum(name, c.labels...), c.want)
		}
	}
	ns, err := f.c.CoreV1().Namespaces().Get(context.Background(), f.ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns.Labels[f.ns] = "yes"
	if _, err := f.c.CoreV1().Namespaces().Update(context.Background(), ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.wantIPs("e", f.v4(48))

	// MetalLB's pool status counters, as its own controller keeps them.
	err = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		st := f.metalPoolStatus(manual)
		return st.AssignedIPv4 == 4 && st.AvailableIPv4 == 5, nil
	})
	if err != nil {
		t.Fatalf("manual pool status %+v, want 4 assigned, 5 available", f.metalPoolStatus(manual))
	}
}

// TestMetalLBSharingAndOnePool: MetalLB's sharing annotation (both names) and one pool for
// all of a dual-stack Service's addresses, which MetalLB's speaker needs.
func TestMetalLBSharingAndOnePool(t *testing.T) {
	testenv.Require(t, env)
	installMetalLBCRD(t)
	metallbNamespace(t)
	f := setup(t, "--pool-api=metallb")
	f.metalPool("v4only", []string{f.v4(8) + "/30"}, func(s *mlb.IPAddressPoolSpec) { s.AllocateTo.Priority = 1 })
	f.metalPool("both", []string{f.v4(16) + "/30", f.v6(16) + "/126"}, func(s *mlb.IPAddressPoolSpec) { s.AllocateTo.Priority = 2 })

	f.service("a", annotate(poolsource.AnnotationMetalLBAllowSharedIP, "k"), ports(80))
	f.wantIPs("a", f.v4(8))
	f.service("b", annotate(poolsource.LegacyAnnotationMetalLBSharedIP, "k"), ports(443))
	f.wantIPs("b", f.v4(8)) // same key, other port: shared
	f.service("c", annotate(poolsource.AnnotationMetalLBAllowSharedIP, "k"), ports(80))
	f.wantIPs("c", f.v4(9)) // same port: not shared

	// RequireDualStack: v4only has priority but no IPv6, so both come from "both".
	f.service("ds", dualStack())
	f.wantIPs("ds", f.v4(16), f.v6(16))
}

// TestBothPoolAPIs: --pool-api=kcm-split,metallb reads both; each API's annotation names its
// own pools, and a Service naming none is served by the API listed first.
func TestBothPoolAPIs(t *testing.T) {
	testenv.Require(t, env)
	installMetalLBCRD(t)
	metallbNamespace(t)
	f := setup(t, "--pool-api=kcm-split,metallb")
	f.pool("own", []string{f.v4(1) + "/32"})
	metal := f.metalPool("metal", []string{f.v4(16) + "/30"})
	f.service("plain")
	f.wantIPs("plain", f.v4(1))
	f.service("m", annotate(poolsource.AnnotationMetalLBAddressPool, metal))
	f.wantIPs("m", f.v4(16))
	f.service("next") // kcm-split's pool is full: MetalLB's is next
	f.wantIPs("next", f.v4(17))
	f.service("o", annotate(poolsource.AnnotationAddressPool, f.ns+"-own"), annotate(poolsource.AnnotationAllowSharedIP, "x"))
	f.waitEvent("o", servicelb.ReasonAllocationFailed)
	_ = v1alpha1.Kind
}

// metricSum adds up the samples of the metric called name whose labels contain every one of
// labels (`key="value"`): the gauges carry pool labels, and tests mostly want their total.
func (f *fixture) metricSum(name string, labels ...string) float64 {
	f.t.Helper()
	_, body := f.ctrl.Get("/metrics")
	sum := 0.0
	for _, line := range strings.Split(body, "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest != "" && rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		series, value, ok := strings.Cut(strings.TrimSpace(rest), " ")
		if !ok {
			series, value = "", strings.TrimSpace(rest)
		}
		if !allIn(series, labels) {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(value), 64); err == nil {
			sum += v
		}
	}
	return sum
}

func allIn(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// pendingCondition returns the Service's LoadBalancerPending condition, or nil.
func pendingCondition(s *corev1.Service) *metav1.Condition {
	if s == nil {
		return nil
	}
	for i := range s.Status.Conditions {
		if s.Status.Conditions[i].Type == servicelb.ConditionLoadBalancerPending {
			return &s.Status.Conditions[i]
		}
	}
	return nil
}

// TestPendingCondition: with --service-pending-condition a Service waiting for an address
// says why in status.conditions, written once per cause, and loses it once served.
func TestPendingCondition(t *testing.T) {
	f := setup(t, "--service-pending-condition")
	f.pool("one", []string{f.v4(1) + "/32"})
	f.service("a")
	f.waitAddress("a")
	f.service("b")
	s := f.wait("b", "has the pending condition", func(s *corev1.Service) bool { return pendingCondition(s) != nil })
	c := pendingCondition(s)
	if c.Status != metav1.ConditionTrue || c.Reason != allocation.WaitPoolExhausted || !strings.Contains(c.Message, "no address available") {
		t.Fatalf("condition %+v", c)
	}
	f.service("c", annotate(poolsource.AnnotationLoadBalancerIPs, f.v4(9)))
	if c := pendingCondition(f.wait("c", "has the pending condition", func(s *corev1.Service) bool { return pendingCondition(s) != nil })); c.Reason != allocation.WaitRequestedIPNotInPool {
		t.Fatalf("c: condition %+v", c)
	}
	// Services synced again for another reason write nothing: the cause is the same.
	before := f.writesTo("b")
	f.service("d") // pending as well: the pool is full
	f.wait("d", "has the pending condition", func(s *corev1.Service) bool { return pendingCondition(s) != nil })
	f.settle("marker")
	if n := f.writesTo("b"); n != before {
		t.Fatalf("b written %d times more while its cause did not change", n-before)
	}
	// b alone waits for the address a frees.
	for _, n := range []string{"c", "d", "marker"} {
		f.delete(n)
		f.wait(n, "went away", func(s *corev1.Service) bool { return s == nil })
	}
	f.delete("a")
	served := f.wait("b", "served without the condition", func(s *corev1.Service) bool {
		return s != nil && len(s.Status.LoadBalancer.Ingress) > 0 && pendingCondition(s) == nil
	})
	if got := ingressIPs(served); !slices.Equal(got, []string{f.v4(1)}) {
		t.Fatalf("b got %v", got)
	}
}
