package servicelb_test

// Integration tests: the service-lb-controller binary, built as it ships, against a real
// etcd + kube-apiserver v1.36.3 (shared/testenv) serving both IP families, with the
// IPAddressPool CRD installed from the chart. Each test creates its own pools, restricted to
// its own namespace and on its own address ranges, so tests cannot take each other's
// addresses.

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/kcm-split/kcm-split/services/servicelb"
	"github.com/kcm-split/kcm-split/services/servicelb/api/v1alpha1"
	"github.com/kcm-split/kcm-split/services/servicelb/poolsource"
	"github.com/kcm-split/kcm-split/shared/testenv"
)

var env *testenv.Env

// TestMain starts a control plane serving both IP families (dual-stack Services need a
// dual-stack service CIDR), with the IPAddressPool CRD installed.
func TestMain(m *testing.M) {
	testenv.MainWithOptions(m, &env, testenv.Options{
		ExtraAPIServerArgs: []string{"--service-cluster-ip-range=10.0.0.0/16,fd00:10::/108"},
		Setup:              func(e *testenv.Env) error { return installCRDs(e.Config) },
	})
}

// controller is the shipped binary, built once per test binary.
var controller = testenv.Binary{ID: servicelb.ControllerID}

type fixture struct {
	t     *testing.T
	c     kubernetes.Interface
	pools *v1alpha1.Client
	ns    string
	block int // this test's address block
	ctrl  *testenv.Controller
}

var blocks atomic.Int32

// setup returns a client, a fresh namespace and a running controller.
func setup(t *testing.T, args ...string) *fixture {
	t.Helper()
	testenv.Require(t, env)
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, c: env.Client(t), pools: v1alpha1.NewClient(dyn), ns: env.Namespace(t), block: int(blocks.Add(1))}
	f.ctrl = env.StartLeading(t, controller, "ctrl", args...)
	return f
}

// v4 and v6 return addresses of this test's own blocks: 10.200.<block>.<i> and
// fd00:200:<block>::<i>.
func (f *fixture) v4(i int) string { return fmt.Sprintf("10.200.%d.%d", f.block, i) }
func (f *fixture) v6(i int) string { return fmt.Sprintf("fd00:200:%d::%x", f.block, i) }

// pool creates a pool restricted to the test's namespace; it is deleted when the test ends.
func (f *fixture) pool(name string, addresses []string, mut ...func(*v1alpha1.IPAddressPoolSpec)) *v1alpha1.IPAddressPool {
	f.t.Helper()
	p := &v1alpha1.IPAddressPool{
		ObjectMeta: metav1.ObjectMeta{Name: f.ns + "-" + name},
		Spec:       v1alpha1.IPAddressPoolSpec{Addresses: addresses, Namespaces: []string{f.ns}},
	}
	for _, m := range mut {
		m(&p.Spec)
	}
	out, err := f.pools.Create(context.Background(), p)
	if err != nil {
		f.t.Fatalf("creating pool %s: %v", p.Name, err)
	}
	f.t.Cleanup(func() { _ = f.pools.Delete(context.Background(), out.Name) })
	return out
}

type svcOpt func(*corev1.Service)

func ports(ps ...int32) svcOpt {
	return func(s *corev1.Service) {
		s.Spec.Ports = nil
		for _, p := range ps {
			s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: fmt.Sprintf("p%d", p), Port: p, Protocol: corev1.ProtocolTCP})
		}
	}
}

func annotate(k, v string) svcOpt {
	return func(s *corev1.Service) {
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		s.Annotations[k] = v
	}
}

func dualStack() svcOpt {
	return func(s *corev1.Service) {
		s.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicyRequireDualStack)
		s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	}
}

func class(c string) svcOpt {
	return func(s *corev1.Service) { s.Spec.LoadBalancerClass = &c }
}

func (f *fixture) service(name string, opts ...svcOpt) *corev1.Service {
	f.t.Helper()
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeLoadBalancer,
			Selector: map[string]string{"app": name},
		},
	}
	ports(80)(s)
	for _, o := range opts {
		o(s)
	}
	out, err := f.c.CoreV1().Services(f.ns).Create(context.Background(), s, metav1.CreateOptions{})
	if err != nil {
		f.t.Fatalf("creating service %s: %v", name, err)
	}
	return out
}

func ingressIPs(s *corev1.Service) []string {
	var out []string
	for _, in := range s.Status.LoadBalancer.Ingress {
		out = append(out, in.IP)
	}
	return out
}

// wait polls the Service until cond holds and returns it.
func (f *fixture) wait(name, what string, cond func(*corev1.Service) bool) *corev1.Service {
	f.t.Helper()
	last, ok := testenv.PollObject(20*time.Millisecond, 60*time.Second, func(ctx context.Context) (*corev1.Service, error) {
		return f.c.CoreV1().Services(f.ns).Get(ctx, name, metav1.GetOptions{})
	}, cond)
	if !ok {
		desc := "<gone>"
		if last != nil {
			desc = fmt.Sprintf("ingress=%v finalizers=%v", ingressIPs(last), last.Finalizers)
		}
		f.t.Fatalf("service %s never %s; last: %s", name, what, desc)
	}
	return last
}

func (f *fixture) waitAddress(name string) *corev1.Service {
	f.t.Helper()
	return f.wait(name, "got an address", func(s *corev1.Service) bool { return s != nil && len(s.Status.LoadBalancer.Ingress) > 0 })
}

// waitEvent waits for an Event with reason on the Service and returns its message.
func (f *fixture) waitEvent(name, reason string) string {
	f.t.Helper()
	var msg string
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		evs, err := f.c.CoreV1().Events(f.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == name && e.Reason == reason {
				msg = e.Message
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		f.t.Fatalf("no %s event on service %s", reason, name)
	}
	return msg
}

// settle waits until the controller has finished every Service sync queued before now: with
// one worker (the default --concurrent-service-syncs) the queue is served in order, so a
// Service created now is synced after them, and records Ensuring once they are done. Their
// Events were recorded before it, and so are listed before it is.
func (f *fixture) settle(marker string) {
	f.t.Helper()
	f.service(marker)
	f.waitEvent(marker, servicelb.ReasonEnsuring)
}

func (f *fixture) hasEvent(name, reason string) bool {
	evs, err := f.c.CoreV1().Events(f.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	for _, e := range evs.Items {
		if e.InvolvedObject.Name == name && e.Reason == reason {
			return true
		}
	}
	return false
}

// writesTo counts the controller's writes to the named Services of the test's namespace,
// none named: to all of them.
func (f *fixture) writesTo(names ...string) int {
	f.t.Helper()
	evs, err := env.Writes(testenv.ByUserAgentPrefix(controller.UserAgentPrefix(), "services"))
	if err != nil {
		f.t.Fatal(err)
	}
	n := 0
	for _, e := range evs {
		if e.ObjectRef.Namespace == f.ns && (len(names) == 0 || slices.Contains(names, e.ObjectRef.Name)) {
			n++
		}
	}
	return n
}

func (f *fixture) delete(name string) {
	f.t.Helper()
	if err := f.c.CoreV1().Services(f.ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

// ---- tests ----

func TestAddressFinalizerAndRelease(t *testing.T) {
	f := setup(t)
	f.pool("main", []string{f.v4(10) + "-" + f.v4(11)})

	f.service("web")
	s := f.waitAddress("web")
	if got := ingressIPs(s); !slices.Equal(got, []string{f.v4(10)}) {
		t.Fatalf("ingress = %v, want [%s]", got, f.v4(10))
	}
	if in := s.Status.LoadBalancer.Ingress[0]; in.IPMode == nil || *in.IPMode != corev1.LoadBalancerIPModeVIP {
		t.Fatalf("ipMode = %v, want VIP", in.IPMode)
	}
	if !slices.Contains(s.Finalizers, servicelb.FinalizerLoadBalancerCleanup) {
		t.Fatalf("finalizers = %v", s.Finalizers)
	}
	f.waitEvent("web", servicelb.ReasonEnsured)
	if n := f.writesTo(); n != 2 {
		t.Fatalf("%d writes to the Service, want 2 (finalizer, status)", n)
	}
	for _, series := range []string{
		`service_controller_loadbalancer_sync_total`,
		`workqueue_adds_total{name="service"}`,
	} {
		if v := f.ctrl.Metric(series); v < 1 {
			t.Errorf("%s = %v, want >= 1", series, v)
		}
	}
	if v := f.ctrl.Metric(`kcm_split_servicelb_addresses_assigned{api="kcm-split",family="IPv4",pool="` + f.ns + `-main"}`); v != 1 {
		t.Errorf("addresses assigned in the pool = %v, want 1", v)
	}
	if v := f.ctrl.Metric(`kcm_split_servicelb_addresses_available{api="kcm-split",family="IPv4",pool="` + f.ns + `-main"}`); v != 1 {
		t.Errorf("addresses available in the pool = %v, want 1", v)
	}
	if v := f.ctrl.Metric(`service_controller_nodesync_error_total`); v != 0 {
		t.Errorf("nodesync errors = %v", v)
	}

	// Deleting the Service releases the address and lets the Service go.
	f.delete("web")
	f.wait("web", "went away", func(s *corev1.Service) bool { return s == nil })
	// The released address is the first free one again.
	f.service("next")
	if got := ingressIPs(f.waitAddress("next")); !slices.Equal(got, []string{f.v4(10)}) {
		t.Fatalf("next got %v, want the released %s", got, f.v4(10))
	}
}

func TestTypeChangeReleases(t *testing.T) {
	f := setup(t)
	f.pool("main", []string{f.v4(1) + "/32"})
	f.service("a")
	f.waitAddress("a")
	f.service("b")
	f.waitEvent("b", servicelb.ReasonAllocationFailed)

	s, err := f.c.CoreV1().Services(f.ns).Get(context.Background(), "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Spec.Type = corev1.ServiceTypeClusterIP
	s.Spec.AllocateLoadBalancerNodePorts = nil
	for i := range s.Spec.Ports {
		s.Spec.Ports[i].NodePort = 0
	}
	if _, err := f.c.CoreV1().Services(f.ns).Update(context.Background(), s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.wait("a", "cleaned up", func(s *corev1.Service) bool {
		return s != nil && len(s.Status.LoadBalancer.Ingress) == 0 && !slices.Contains(s.Finalizers, servicelb.FinalizerLoadBalancerCleanup)
	})
	if got := ingressIPs(f.waitAddress("b")); !slices.Equal(got, []string{f.v4(1)}) {
		t.Fatalf("b got %v, want the address a gave back", got)
	}
	f.waitEvent("a", servicelb.ReasonDeleted)
}

func TestSharingKey(t *testing.T) {
	f := setup(t)
	f.pool("main", []string{f.v4(0) + "/29"}, func(s *v1alpha1.IPAddressPoolSpec) { s.AvoidBuggyIPs = true })
	key := annotate(poolsource.AnnotationAllowSharedIP, "shared")
	f.service("http", key, ports(80))
	a := ingressIPs(f.waitAddress("http"))
	f.service("https", key, ports(443))
	b := ingressIPs(f.waitAddress("https"))
	if !slices.Equal(a, b) || !slices.Equal(a, []string{f.v4(1)}) {
		t.Fatalf("http %v and https %v: want both on %s (.0 avoided)", a, b, f.v4(1))
	}
	f.service("http2", key, ports(80))
	c := ingressIPs(f.waitAddress("http2"))
	if slices.Equal(c, a) {
		t.Fatalf("http2 shares %v with http although both use port 80", c)
	}
	f.service("nokey", ports(8080))
	if d := ingressIPs(f.waitAddress("nokey")); slices.Equal(d, a) || slices.Equal(d, c) {
		t.Fatalf("a Service without the key shares %v", d)
	}
	// The shared address stays with https when http goes.
	f.delete("http")
	f.wait("http", "went away", func(s *corev1.Service) bool { return s == nil })
	f.service("other", ports(80))
	if got := ingressIPs(f.waitAddress("other")); slices.Equal(got, a) {
		t.Fatalf("other got %v, still held by https", got)
	}
}

func TestDualStack(t *testing.T) {
	f := setup(t)
	f.pool("v4", []string{f.v4(5) + "/32"})
	f.pool("v6", []string{f.v6(5) + "/128"}, func(s *v1alpha1.IPAddressPoolSpec) { s.Priority = 1 })
	f.service("ds", dualStack())
	s := f.wait("ds", "got two addresses", func(s *corev1.Service) bool { return s != nil && len(s.Status.LoadBalancer.Ingress) == 2 })
	if got := ingressIPs(s); !slices.Equal(got, []string{f.v4(5), f.v6(5)}) {
		t.Fatalf("ingress = %v, want [%s %s]", got, f.v4(5), f.v6(5))
	}
	// The IPv4 pool is now empty: a second RequireDualStack Service waits and holds
	// nothing, and a single-stack IPv6 one still gets nothing because ds holds it.
	f.service("ds2", dualStack())
	f.waitEvent("ds2", servicelb.ReasonAllocationFailed)
	f.delete("ds")
	s = f.wait("ds2", "got two addresses", func(s *corev1.Service) bool { return s != nil && len(s.Status.LoadBalancer.Ingress) == 2 })
	if got := ingressIPs(s); !slices.Equal(got, []string{f.v4(5), f.v6(5)}) {
		t.Fatalf("ds2 = %v", got)
	}
}

func TestExhaustionThenServedOnRelease(t *testing.T) {
	f := setup(t)
	f.pool("tiny", []string{f.v4(1) + "-" + f.v4(2)})
	f.service("a")
	f.service("b")
	f.waitAddress("a")
	f.waitAddress("b")
	f.service("c")
	msg := f.waitEvent("c", servicelb.ReasonAllocationFailed)
	if !strings.Contains(msg, "no address available") {
		t.Fatalf("AllocationFailed message: %q", msg)
	}
	if s := f.wait("c", "got the finalizer", func(s *corev1.Service) bool { return s != nil && len(s.Finalizers) > 0 }); len(s.Status.LoadBalancer.Ingress) != 0 {
		t.Fatalf("c has %v", ingressIPs(s))
	}
	start := time.Now()
	f.delete("a")
	s := f.waitAddress("c")
	took := time.Since(start)
	// That the release itself wakes the waiting Service (rather than its retry, 5 s later at
	// the earliest) is shown by the state's unit tests; here the time is only printed.
	t.Logf("pending Service served %s after the deletion (its first retry was due after 5 s)", took)
	if got := ingressIPs(s); !slices.Equal(got, []string{f.v4(1)}) {
		t.Fatalf("c got %v", got)
	}
}

func TestPoolGrowsServesPending(t *testing.T) {
	f := setup(t)
	p := f.pool("grow", []string{f.v4(1) + "/32"})
	f.service("a")
	f.waitAddress("a")
	f.service("b")
	f.waitEvent("b", servicelb.ReasonAllocationFailed)
	p, err := f.pools.Get(context.Background(), p.Name)
	if err != nil {
		t.Fatal(err)
	}
	p.Spec.Addresses = append(p.Spec.Addresses, f.v4(2)+"/32")
	if _, err := f.pools.Update(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	if got := ingressIPs(f.waitAddress("b")); !slices.Equal(got, []string{f.v4(2)}) {
		t.Fatalf("b got %v", got)
	}
}

func TestPoolEditMovesStaleAddress(t *testing.T) {
	f := setup(t)
	p := f.pool("edit", []string{f.v4(1) + "-" + f.v4(3)})
	f.service("a")
	f.service("b")
	f.waitAddress("a")
	f.waitAddress("b")
	p, err := f.pools.Get(context.Background(), p.Name)
	if err != nil {
		t.Fatal(err)
	}
	before := map[string][]string{}
	for _, n := range []string{"a", "b"} {
		s, _ := f.c.CoreV1().Services(f.ns).Get(context.Background(), n, metav1.GetOptions{})
		before[n] = ingressIPs(s)
	}
	// Drop .1 (whoever holds it), keep .2 and add .4.
	p.Spec.Addresses = []string{f.v4(2) + "/32", f.v4(4) + "/32"}
	if _, err := f.pools.Update(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	moved := ""
	for n, ips := range before {
		if slices.Equal(ips, []string{f.v4(1)}) {
			moved = n
		}
	}
	if moved == "" {
		t.Fatalf("nobody held %s: %v", f.v4(1), before)
	}
	s := f.wait(moved, "moved off the removed address", func(s *corev1.Service) bool {
		return s != nil && slices.Equal(ingressIPs(s), []string{f.v4(4)})
	})
	_ = s
	f.waitEvent(moved, servicelb.ReasonAddressReassigned)
	// The edit queued both Services at once, the other maybe after the moved one.
	f.settle("marker")
	for n, ips := range before {
		if n == moved {
			continue
		}
		s, _ := f.c.CoreV1().Services(f.ns).Get(context.Background(), n, metav1.GetOptions{})
		if !slices.Equal(ingressIPs(s), ips) {
			t.Fatalf("%s moved from %v to %v although its address stayed in the pool", n, ips, ingressIPs(s))
		}
	}
}

func TestRequestedAddressAndPool(t *testing.T) {
	f := setup(t)
	f.pool("auto", []string{f.v4(1) + "/32"})
	f.pool("manual", []string{f.v4(100) + "-" + f.v4(110)}, func(s *v1alpha1.IPAddressPoolSpec) { s.AutoAssign = ptr.To(false) })
	f.service("want-ip", annotate(poolsource.AnnotationLoadBalancerIPs, f.v4(105)))
	if got := ingressIPs(f.waitAddress("want-ip")); !slices.Equal(got, []string{f.v4(105)}) {
		t.Fatalf("want-ip got %v", got)
	}
	f.service("want-pool", annotate(poolsource.AnnotationAddressPool, f.ns+"-manual"))
	if got := ingressIPs(f.waitAddress("want-pool")); !slices.Equal(got, []string{f.v4(100)}) {
		t.Fatalf("want-pool got %v", got)
	}
	f.service("plain")
	if got := ingressIPs(f.waitAddress("plain")); !slices.Equal(got, []string{f.v4(1)}) {
		t.Fatalf("plain got %v (manual pool must not auto-assign)", got)
	}
	// Asking for a taken address waits; asking for one in no pool is reported.
	f.service("taken", annotate(poolsource.AnnotationLoadBalancerIPs, f.v4(105)))
	f.waitEvent("taken", servicelb.ReasonAllocationFailed)
	f.service("bad", annotate(poolsource.AnnotationLoadBalancerIPs, "not-an-ip"))
	f.waitEvent("bad", servicelb.ReasonSyncFailed)
}

func TestRestartKeepsAddresses(t *testing.T) {
	f := setup(t)
	f.pool("main", []string{f.v4(0) + "/27"})
	f.pool("v6", []string{f.v6(0) + "/124"})
	names := []string{"s0", "s1", "s2", "s3", "s4", "s5"}
	for i, n := range names {
		if i%3 == 2 {
			f.service(n, dualStack())
		} else {
			f.service(n, annotate(poolsource.AnnotationAllowSharedIP, "k"), ports(int32(1000+i)))
		}
	}
	before := map[string][]string{}
	for i, n := range names {
		want := 1
		if i%3 == 2 {
			want = 2
		}
		before[n] = ingressIPs(f.wait(n, "served", func(s *corev1.Service) bool { return s != nil && len(s.Status.LoadBalancer.Ingress) == want }))
	}
	writes := f.writesTo()

	// A new leader takes over: a standby starts, the leader stops and releases the Lease.
	standby := env.Start(t, controller, "ctrl2")
	if !f.ctrl.Stop(30 * time.Second) {
		t.Fatal("the leader did not stop on SIGTERM")
	}
	standby.WaitLeadingAndSynced(controller.Lease(), 60*time.Second)
	f.service("later", ports(9999))
	later := ingressIPs(f.waitAddress("later"))
	for n, ips := range before {
		s, _ := f.c.CoreV1().Services(f.ns).Get(context.Background(), n, metav1.GetOptions{})
		if !slices.Equal(ingressIPs(s), ips) {
			t.Fatalf("%s changed from %v to %v across the restart", n, ips, ingressIPs(s))
		}
		for _, ip := range later {
			if slices.Contains(ips, ip) {
				t.Fatalf("later got %s, which %s holds", ip, n)
			}
		}
	}
	if n := f.writesTo() - writes; n != 2 {
		evs, _ := env.Writes(testenv.ByUserAgentPrefix(controller.UserAgentPrefix(), "services"))
		for _, e := range evs {
			if e.ObjectRef.Namespace == f.ns {
				t.Logf("%s %s %s/%s %d", e.Verb, e.UserAgent, e.ObjectRef.Name, e.ObjectRef.Subresource, e.ResponseStatus.Code)
			}
		}
		t.Fatalf("%d Service writes after the restart, want 2 (the new Service's finalizer and status)", n)
	}
}

func TestOtherClassLeftAlone(t *testing.T) {
	f := setup(t)
	f.pool("main", []string{f.v4(1) + "-" + f.v4(5)})
	f.service("theirs", class("example.com/other"))
	f.service("sentinel")
	f.waitAddress("sentinel")
	// Events leave in the order recorded: sentinel's last one listed, any on theirs is too.
	f.waitEvent("sentinel", servicelb.ReasonEnsured)
	s, err := f.c.CoreV1().Services(f.ns).Get(context.Background(), "theirs", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Finalizers) != 0 || len(s.Status.LoadBalancer.Ingress) != 0 || f.hasEvent("theirs", servicelb.ReasonEnsuring) {
		t.Fatalf("a Service of another class was touched: finalizers %v, ingress %v", s.Finalizers, ingressIPs(s))
	}
}

func TestClassFlag(t *testing.T) {
	f := setup(t, "--"+servicelb.FlagLoadBalancerClass+"=lb.kcm-split.io/pools")
	f.pool("main", []string{f.v4(1) + "-" + f.v4(5)})
	// default first: served in order by one worker, mine's address says default's turn is over.
	f.service("default")
	f.service("mine", class("lb.kcm-split.io/pools"))
	f.waitAddress("mine")
	s, _ := f.c.CoreV1().Services(f.ns).Get(context.Background(), "default", metav1.GetOptions{})
	if len(s.Finalizers) != 0 || len(s.Status.LoadBalancer.Ingress) != 0 {
		t.Fatalf("a class-less Service was served by a controller with a class: %v", ingressIPs(s))
	}
}

func TestInvalidPool(t *testing.T) {
	f := setup(t)
	// The schema rejects what it can at admission.
	for _, bad := range []string{"not-an-ip", "10.0.0.1-fd00::1", "10.0.0.0/33", "1-2-3"} {
		_, err := f.pools.Create(context.Background(), &v1alpha1.IPAddressPool{
			ObjectMeta: metav1.ObjectMeta{Name: f.ns + "-rejected"},
			Spec:       v1alpha1.IPAddressPoolSpec{Addresses: []string{bad}},
		})
		if !apierrors.IsInvalid(err) {
			t.Fatalf("pool with %q: err = %v, want Invalid", bad, err)
		}
	}
	// The controller reports the rest: a reversed range, and an overlap with an older pool.
	bad := f.pool("reversed", []string{f.v4(9) + "-" + f.v4(1)})
	f.pool("good", []string{f.v4(20) + "/32"})
	over := f.pool("overlap", []string{f.v4(20) + "-" + f.v4(21)})
	for name, reason := range map[string]string{bad.Name: v1alpha1.ReasonInvalidAddresses, over.Name: v1alpha1.ReasonOverlapping} {
		err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
			p, err := f.pools.Get(ctx, name)
			if err != nil {
				return false, nil
			}
			for _, c := range p.Status.Conditions {
				if c.Type == v1alpha1.ConditionValid && c.Status == metav1.ConditionFalse && c.Reason == reason {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			t.Fatalf("pool %s never got Valid=False/%s", name, reason)
		}
	}
	f.service("on-bad", annotate(poolsource.AnnotationAddressPool, bad.Name))
	f.waitEvent("on-bad", servicelb.ReasonSyncFailed)
	f.service("plain")
	if got := ingressIPs(f.waitAddress("plain")); !slices.Equal(got, []string{f.v4(20)}) {
		t.Fatalf("plain got %v", got)
	}
	f.service("plain2")
	f.waitEvent("plain2", servicelb.ReasonAllocationFailed)
	// The valid pool reports its counts.
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := f.pools.Get(ctx, f.ns+"-good")
		return err == nil && p.Status.AssignedIPv4 == 1 && p.Status.AvailableIPv4 == 0, nil
	})
	if err != nil {
		p, _ := f.pools.Get(context.Background(), f.ns+"-good")
		t.Fatalf("good pool status %+v", p.Status)
	}
	if s, _ := f.c.CoreV1().Services(f.ns).Get(context.Background(), "on-bad", metav1.GetOptions{}); len(s.Status.LoadBalancer.Ingress) != 0 {
		t.Fatalf("a Service asking for an invalid pool got %v", ingressIPs(s))
	}
}

// TestDemoPoolManifest applies the pool `make up` ships and serves a dual-stack Service from
// it, so the manifest cannot drift from the CRD.
func TestDemoPoolManifest(t *testing.T) {
	f := setup(t)
	raw, err := os.ReadFile("../../deploy/local/manifests/servicelb-demo-pool.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := yaml.Unmarshal(raw, &obj); err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: obj}
	if _, err := dyn.Resource(v1alpha1.GroupVersionResource).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		t.Fatalf("applying the demo pool: %v", err)
	}
	t.Cleanup(func() { _ = f.pools.Delete(context.Background(), u.GetName()) })
	f.service("demo", dualStack())
	s := f.wait("demo", "got two addresses", func(s *corev1.Service) bool { return s != nil && len(s.Status.LoadBalancer.Ingress) == 2 })
	// Services of earlier tests whose pools are gone may hold the first addresses (their
	// namespaces only turn Terminating here), so check the ranges, not exact addresses.
	got := ingressIPs(s)
	v4, v6 := netip.MustParseAddr(got[0]), netip.MustParseAddr(got[1])
	if !netip.MustParsePrefix("198.18.0.0/24").Contains(v4) || v4.As4()[3] == 0 || !netip.MustParsePrefix("2001:db8::/120").Contains(v6) {
		t.Fatalf("demo got %v, want one address of each of the demo pool's ranges (.0 avoided)", got)
	}
}

// TestPoolAPIInstalledLater runs last: it removes the CRD, starts the controller without it
// (Ready, Services wait), then installs the CRD and a pool, and the waiting Service is served.
func TestPoolAPIInstalledLater(t *testing.T) {
	testenv.Require(t, env)
	deleteCRD(t)
	t.Cleanup(func() { _ = installCRDs(env.Config) })

	f := setup(t)
	f.service("early")
	f.waitEvent("early", servicelb.ReasonAllocationFailed)
	if err := installCRDs(env.Config); err != nil {
		t.Fatal(err)
	}
	f.pool("late", []string{f.v4(1) + "/32"})
	if got := ingressIPs(f.waitAddress("early")); !slices.Equal(got, []string{f.v4(1)}) {
		t.Fatalf("early got %v", got)
	}
}

// TestClassServiceTypeChangedWhileDown: with --load-balancer-class, a Service of that class
// whose type changes while no controller runs loses its class with the type; the controller
// that comes back still removes its finalizer (its address claim names the Service) and
// releases the claim, as upstream's controller removes a finalizer it put on.
func TestClassServiceTypeChangedWhileDown(t *testing.T) {
	classArg := "--" + servicelb.FlagLoadBalancerClass + "=lb.kcm-split.io/pools"
	f := setup(t, classArg)
	ctx := context.Background()
	f.pool("main", []string{f.v4(1) + "/32"})
	f.service("mine", class("lb.kcm-split.io/pools"))
	addr := ingressIPs(f.waitAddress("mine"))[0]
	if !f.ctrl.Stop(30 * time.Second) {
		t.Fatal("the controller did not stop on SIGTERM")
	}
	s, err := f.c.CoreV1().Services(f.ns).Get(ctx, "mine", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Spec.Type = corev1.ServiceTypeClusterIP
	s.Spec.LoadBalancerClass = nil
	s.Spec.AllocateLoadBalancerNodePorts = nil
	for i := range s.Spec.Ports {
		s.Spec.Ports[i].NodePort = 0
	}
	if _, err := f.c.CoreV1().Services(f.ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	env.StartLeading(t, controller, "ctrl2", classArg)
	f.wait("mine", "its finalizer removed", func(s *corev1.Service) bool {
		return s != nil && !slices.Contains(s.Finalizers, servicelb.FinalizerLoadBalancerCleanup)
	})
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := f.c.NetworkingV1().IPAddresses().Get(ctx, addr, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("the claim of %s was not released: %v", addr, err)
	}
}
