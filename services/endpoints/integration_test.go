package endpointscontroller_test

// Integration tests: the endpoints-controller binary, built as it ships, against a real
// etcd + kube-apiserver v1.36.3 (shared/testenv). Tests run one after another; each starts
// the controller processes it needs and stops them when it ends.

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	endpointscontroller "github.com/kcm-split/kcm-split/services/endpoints"
	"github.com/kcm-split/kcm-split/services/endpoints/endpoints"
	"github.com/kcm-split/kcm-split/services/endpoints/internal/testobj"
	"github.com/kcm-split/kcm-split/shared/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.MainWithOptions(m, &env, envOptions()) }

// envOptions are the control plane's: the apiserver allocates both families (dual-stack
// Services), with extraArgs, and node-1, where the test Pods run, exists: the EndpointSlice
// controller publishes only Pods of known Nodes.
func envOptions(extraArgs ...string) testenv.Options {
	return testenv.Options{
		ExtraAPIServerArgs: append([]string{"--service-cluster-ip-range=10.0.0.0/16,fd00:10:96::/112"}, extraArgs...),
		Setup: func(env *testenv.Env) error {
			c, err := kubernetes.NewForConfig(env.Config)
			if err != nil {
				return err
			}
			_, err = c.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}, metav1.CreateOptions{})
			return err
		},
	}
}

// controller is the shipped binary, built once per test binary.
var controller = testenv.Binary{ID: endpointscontroller.ControllerID}

// ---- object builders ----

type podOpt func(*corev1.Pod)

func notReady() podOpt {
	return func(p *corev1.Pod) { setReady(p, false) }
}
func withPorts(ports ...corev1.ContainerPort) podOpt {
	return func(p *corev1.Pod) { p.Spec.Containers[0].Ports = ports }
}
func withHostname(host, subdomain string) podOpt {
	return func(p *corev1.Pod) { p.Spec.Hostname, p.Spec.Subdomain = host, subdomain }
}

func setReady(p *corev1.Pod, ready bool) {
	status := corev1.ConditionTrue
	if !ready {
		status = corev1.ConditionFalse
	}
	// As a kubelet reports it: the transition time is what a Pod change's trigger time is
	// taken from. Without it a sync caused by Pods alone rightly writes no
	// last-change-trigger-time, and whether the Service's first sync saw every Pod was a race.
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status, LastTransitionTime: metav1.Now()}}
}

func makePod(ns, name, ip string, labels map[string]string, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			NodeName:   "node-1",
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}},
	}
	setReady(p, true)
	for _, o := range opts {
		o(p)
	}
	return p
}

// createPod creates the Pod and then writes its status, as a kubelet would.
func createPod(t *testing.T, c kubernetes.Interface, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	status := p.Status
	created, err := c.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s: %v", p.Name, err)
	}
	created.Status = status
	updated, err := c.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("pod %s status: %v", p.Name, err)
	}
	return updated
}

func makeService(ns, name string, selector map[string]string, ports ...corev1.ServicePort) *corev1.Service {
	if len(ports) == 0 {
		ports = []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}}
	}
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"team": "web"}},
		Spec:       corev1.ServiceSpec{Selector: selector, Ports: ports},
	}
}

func createService(t *testing.T, c kubernetes.Interface, s *corev1.Service) *corev1.Service {
	t.Helper()
	out, err := c.CoreV1().Services(s.Namespace).Create(context.Background(), s, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create service %s: %v", s.Name, err)
	}
	return out
}

// waitEndpoints polls until cond holds for the Endpoints ns/name and returns it.
func waitEndpoints(t *testing.T, c kubernetes.Interface, ns, name string, what string, cond func(*corev1.Endpoints) bool) *corev1.Endpoints {
	t.Helper()
	last, ok := testenv.PollObject(50*time.Millisecond, 30*time.Second, func(ctx context.Context) (*corev1.Endpoints, error) {
		return c.CoreV1().Endpoints(ns).Get(ctx, name, metav1.GetOptions{})
	}, cond)
	if !ok {
		t.Fatalf("Endpoints %s/%s never became %s; last: %s", ns, name, what, describe(last))
	}
	return last
}

func describe(ep *corev1.Endpoints) string {
	if ep == nil {
		return "<none>"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "labels=%v annotations=%v", ep.Labels, ep.Annotations)
	for i, s := range ep.Subsets {
		fmt.Fprintf(&b, " subset[%d]{ready=%v notReady=%v ports=%v}", i, testobj.IPs(s.Addresses), testobj.IPs(s.NotReadyAddresses), s.Ports)
	}
	return b.String()
}

func equal(a []string, b ...string) bool {
	sort.Strings(b)
	return strings.Join(a, ",") == strings.Join(b, ",")
}

// controllerWrites counts the writes the controller made to Endpoints in ns.
func controllerWrites(t *testing.T, ns string) int {
	t.Helper()
	evs, err := env.Writes(testenv.ByUserAgentPrefix(controller.UserAgentPrefix(), "endpoints"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ev := range evs {
		if ev.ObjectRef.Namespace == ns {
			n++
		}
	}
	return n
}

// withController is the common start of a test: a client, a fresh namespace, and one
// controller that leads with synced caches.
func withController(t *testing.T) (kubernetes.Interface, string) {
	t.Helper()
	testenv.Require(t, env)
	c := env.Client(t)
	ns := env.Namespace(t)
	env.StartLeading(t, controller, "ctrl")
	return c, ns
}

// ---- tests ----

func TestReadyAndNotReadyAddresses(t *testing.T) {
	c, ns := withController(t)

	sel := map[string]string{"app": "web"}
	createService(t, c, makeService(ns, "web", sel))
	createPod(t, c, makePod(ns, "a", "10.1.0.1", sel))
	createPod(t, c, makePod(ns, "b", "10.1.0.2", sel))
	createPod(t, c, makePod(ns, "c", "10.1.0.3", sel, notReady()))
	createPod(t, c, makePod(ns, "other", "10.1.0.9", map[string]string{"app": "db"}))

	ep := waitEndpoints(t, c, ns, "web", "2 ready + 1 not ready", func(ep *corev1.Endpoints) bool {
		return ep != nil && equal(testobj.ReadyIPs(ep), "10.1.0.1", "10.1.0.2") && equal(testobj.NotReadyIPs(ep), "10.1.0.3")
	})
	if len(ep.Subsets) != 1 || len(ep.Subsets[0].Ports) != 1 || ep.Subsets[0].Ports[0].Port != 8080 || ep.Subsets[0].Ports[0].Name != "http" {
		t.Fatalf("ports = %s", describe(ep))
	}
	if ep.Labels["team"] != "web" || ep.Labels["endpoints.kubernetes.io/managed-by"] != "endpoint-controller" {
		t.Fatalf("labels = %v", ep.Labels)
	}
	if _, err := time.Parse(time.RFC3339Nano, ep.Annotations["endpoints.kubernetes.io/last-change-trigger-time"]); err != nil {
		t.Fatalf("last-change-trigger-time: %v (annotations %v)", err, ep.Annotations)
	}
	for _, a := range ep.Subsets[0].Addresses {
		if a.TargetRef == nil || a.TargetRef.Kind != "Pod" || a.TargetRef.Namespace != ns || a.TargetRef.UID == "" || a.NodeName == nil || *a.NodeName != "node-1" {
			t.Fatalf("address %+v lacks targetRef or nodeName", a)
		}
	}
}

func TestNamedAndMultiplePorts(t *testing.T) {
	c, ns := withController(t)

	sel := map[string]string{"app": "multi"}
	createService(t, c, makeService(ns, "multi", sel,
		corev1.ServicePort{Name: "http", Port: 80, TargetPort: intstr.FromString("web"), Protocol: corev1.ProtocolTCP},
		corev1.ServicePort{Name: "metrics", Port: 9090, TargetPort: intstr.FromInt32(9090), Protocol: corev1.ProtocolTCP},
	))
	// a names its port "web" 8080, b names it "web" 8081, c has no "web" port at all.
	createPod(t, c, makePod(ns, "a", "10.2.0.1", sel, withPorts(corev1.ContainerPort{Name: "web", ContainerPort: 8080})))
	createPod(t, c, makePod(ns, "b", "10.2.0.2", sel, withPorts(corev1.ContainerPort{Name: "web", ContainerPort: 8081})))
	createPod(t, c, makePod(ns, "c", "10.2.0.3", sel))

	// Canonical packing (as upstream): ports served by exactly the same addresses share a
	// subset. http resolves to 8080 on a and 8081 on b, c lacks the named port, and all three
	// serve metrics. The wait is for exactly that: before c is seen, a and b alone also make
	// three subsets (http:8080, http:8081 and metrics of two addresses).
	want := map[string][]string{
		"http:8080":    {"10.2.0.1"},
		"http:8081":    {"10.2.0.2"},
		"metrics:9090": {"10.2.0.1", "10.2.0.2", "10.2.0.3"},
	}
	waitEndpoints(t, c, ns, "multi", fmt.Sprint(want), func(ep *corev1.Endpoints) bool {
		return ep != nil && maps.EqualFunc(addressesByPorts(ep), want, slices.Equal)
	})
}

// addressesByPorts maps each subset's ports ("name:port", sorted, comma-separated) to its
// ready IPs, sorted.
func addressesByPorts(ep *corev1.Endpoints) map[string][]string {
	out := map[string][]string{}
	for _, s := range ep.Subsets {
		var ports []string
		for _, p := range s.Ports {
			ports = append(ports, fmt.Sprintf("%s:%d", p.Name, p.Port))
		}
		sort.Strings(ports)
		out[strings.Join(ports, ",")] = testobj.IPs(s.Addresses)
	}
	return out
}

func TestHeadlessAndPublishNotReady(t *testing.T) {
	c, ns := withController(t)

	sel := map[string]string{"app": "db"}
	headless := makeService(ns, "db", sel)
	headless.Spec.ClusterIP = corev1.ClusterIPNone
	headless.Spec.Ports = nil
	createService(t, c, headless)

	pub := makeService(ns, "db-all", sel)
	pub.Spec.PublishNotReadyAddresses = true
	createService(t, c, pub)

	createPod(t, c, makePod(ns, "db-0", "10.3.0.1", sel, withHostname("db-0", "db")))
	createPod(t, c, makePod(ns, "db-1", "10.3.0.2", sel, withHostname("db-1", "other"), notReady()))

	ep := waitEndpoints(t, c, ns, "db", "address-only with hostname", func(ep *corev1.Endpoints) bool {
		return ep != nil && equal(testobj.ReadyIPs(ep), "10.3.0.1") && equal(testobj.NotReadyIPs(ep), "10.3.0.2")
	})
	if _, ok := ep.Labels["service.kubernetes.io/headless"]; !ok {
		t.Fatalf("headless label missing: %v", ep.Labels)
	}
	for _, s := range ep.Subsets {
		if len(s.Ports) != 0 {
			t.Fatalf("headless service without ports got ports: %s", describe(ep))
		}
		for _, a := range s.Addresses {
			if a.Hostname != "db-0" {
				t.Fatalf("db-0 hostname = %q (subdomain matches the service)", a.Hostname)
			}
		}
		for _, a := range s.NotReadyAddresses {
			if a.Hostname != "" {
				t.Fatalf("db-1 hostname = %q, want none (subdomain differs)", a.Hostname)
			}
		}
	}
	waitEndpoints(t, c, ns, "db-all", "all addresses ready", func(ep *corev1.Endpoints) bool {
		return ep != nil && equal(testobj.ReadyIPs(ep), "10.3.0.1", "10.3.0.2") && len(testobj.NotReadyIPs(ep)) == 0
	})
}

func TestReadinessFlipAndServiceDelete(t *testing.T) {
	c, ns := withController(t)
	ctx := context.Background()

	sel := map[string]string{"app": "flip"}
	createService(t, c, makeService(ns, "flip", sel))
	pod := createPod(t, c, makePod(ns, "p", "10.4.0.1", sel))
	waitEndpoints(t, c, ns, "flip", "ready", func(ep *corev1.Endpoints) bool { return ep != nil && equal(testobj.ReadyIPs(ep), "10.4.0.1") })

	setReady(pod, false)
	pod, err := c.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitEndpoints(t, c, ns, "flip", "not ready", func(ep *corev1.Endpoints) bool {
		return ep != nil && len(testobj.ReadyIPs(ep)) == 0 && equal(testobj.NotReadyIPs(ep), "10.4.0.1")
	})
	setReady(pod, true)
	if _, err := c.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitEndpoints(t, c, ns, "flip", "ready again", func(ep *corev1.Endpoints) bool {
		return ep != nil && equal(testobj.ReadyIPs(ep), "10.4.0.1") && len(testobj.NotReadyIPs(ep)) == 0
	})

	if err := c.CoreV1().Services(ns).Delete(ctx, "flip", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitEndpoints(t, c, ns, "flip", "deleted", func(ep *corev1.Endpoints) bool { return ep == nil })
}

func TestOrphansSweptAtStartAndUserManagedLeftAlone(t *testing.T) {
	testenv.Require(t, env)
	c := env.Client(t)
	ns := env.Namespace(t)
	ctx := context.Background()

	// Before the controller runs: an orphan (no Service), a leader-election lock object,
	// an ExternalName Service and a selector-less Service with user-managed Endpoints.
	mk := func(name string, annotations map[string]string) {
		ep := &corev1.Endpoints{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: annotations},
			Subsets:    []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{{IP: "192.0.2.10"}}, Ports: []corev1.EndpointPort{{Port: 5432}}}},
		}
		if _, err := c.CoreV1().Endpoints(ns).Create(ctx, ep, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mk("orphan", nil)
	mk("lock", map[string]string{"control-plane.alpha.kubernetes.io/leader": `{"holderIdentity":"x"}`})
	ext := makeService(ns, "external", nil)
	ext.Spec.Type = corev1.ServiceTypeExternalName
	ext.Spec.ExternalName = "db.example.com"
	ext.Spec.Ports = nil
	createService(t, c, ext)
	mk("external", nil)
	createService(t, c, makeService(ns, "manual", nil))
	mk("manual", nil)

	env.StartLeading(t, controller, "ctrl")
	waitEndpoints(t, c, ns, "orphan", "deleted", func(ep *corev1.Endpoints) bool { return ep == nil })

	// Sentinel: once a new Service's Endpoints exist, the start-up sweep has been processed.
	sel := map[string]string{"app": "sentinel"}
	createService(t, c, makeService(ns, "sentinel", sel))
	createPod(t, c, makePod(ns, "s", "10.5.0.1", sel))
	waitEndpoints(t, c, ns, "sentinel", "ready", func(ep *corev1.Endpoints) bool { return ep != nil && equal(testobj.ReadyIPs(ep), "10.5.0.1") })

	for _, name := range []string{"lock", "external", "manual"} {
		ep, err := c.CoreV1().Endpoints(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("%s: %v (must be left alone)", name, err)
		}
		if !equal(testobj.ReadyIPs(ep), "192.0.2.10") {
			t.Fatalf("%s was changed: %s", name, describe(ep))
		}
	}
	evs, err := env.Writes(testenv.ByUserAgentPrefix(controller.UserAgentPrefix(), "endpoints"))
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if ev.ObjectRef.Namespace == ns && ev.ObjectRef.Name != "orphan" && ev.ObjectRef.Name != "sentinel" {
			t.Fatalf("controller wrote %s %s", ev.Verb, ev.ObjectRef.Name)
		}
	}
}

// createPods creates n ready Pods concurrently.
func createPods(t *testing.T, c kubernetes.Interface, ns string, n int, sel map[string]string) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 16)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			p := makePod(ns, fmt.Sprintf("p-%04d", i), fmt.Sprintf("10.%d.%d.%d", 100+i/65536, (i/256)%256, i%256), sel)
			status := p.Status
			created, err := c.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{})
			if err != nil {
				errs <- err
				return
			}
			created.Status = status
			if _, err := c.CoreV1().Pods(ns).UpdateStatus(context.Background(), created, metav1.UpdateOptions{}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestTruncationAtCapacity(t *testing.T) {
	testenv.Require(t, env)
	c := env.Client(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	sel := map[string]string{"app": "big"}
	createPods(t, c, ns, 1001, sel)
	env.StartLeading(t, controller, "ctrl")
	createService(t, c, makeService(ns, "big", sel))

	ep := waitEndpoints(t, c, ns, "big", "truncated to 1000", func(ep *corev1.Endpoints) bool {
		return ep != nil && len(testobj.ReadyIPs(ep))+len(testobj.NotReadyIPs(ep)) == 1000
	})
	if ep.Annotations["endpoints.kubernetes.io/over-capacity"] != "truncated" {
		t.Fatalf("over-capacity annotation = %q", ep.Annotations["endpoints.kubernetes.io/over-capacity"])
	}
	for _, name := range []string{"p-0000", "p-0001"} {
		if err := c.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
	}
	waitEndpoints(t, c, ns, "big", "999 addresses without the annotation", func(ep *corev1.Endpoints) bool {
		if ep == nil {
			return false
		}
		_, annotated := ep.Annotations["endpoints.kubernetes.io/over-capacity"]
		return len(testobj.ReadyIPs(ep)) == 999 && !annotated
	})
}

func TestRestartOverCorrectStateWritesNothing(t *testing.T) {
	testenv.Require(t, env)
	c := env.Client(t)
	ns := env.Namespace(t)

	// Everything exists before the controller first starts: the cold sync must write exactly
	// once per Service, and a restart over that state not at all.
	for i, name := range []string{"a", "b", "c"} {
		sel := map[string]string{"app": name}
		createService(t, c, makeService(ns, name, sel))
		createPod(t, c, makePod(ns, name+"-0", fmt.Sprintf("10.6.%d.1", i), sel))
		createPod(t, c, makePod(ns, name+"-1", fmt.Sprintf("10.6.%d.2", i), sel, notReady()))
	}
	first := env.StartLeading(t, controller, "first")
	for _, name := range []string{"a", "b", "c"} {
		waitEndpoints(t, c, ns, name, "complete", func(ep *corev1.Endpoints) bool {
			return ep != nil && len(testobj.ReadyIPs(ep)) == 1 && len(testobj.NotReadyIPs(ep)) == 1
		})
	}
	first.Stop(30 * time.Second)
	before := controllerWrites(t, ns)
	if before != 3 {
		t.Fatalf("cold sync wrote %d times for 3 Services, want 3 (one create each)", before)
	}

	second := env.StartLeading(t, controller, "second")
	// Wait until the start-up backlog is worked off: the queue is empty and nothing is in
	// flight. A sentinel Service created afterwards must also be done, so events after the
	// restart are processed too.
	other := env.Namespace(t)
	sel := map[string]string{"app": "sentinel"}
	createService(t, c, makeService(other, "sentinel", sel))
	createPod(t, c, makePod(other, "s", "10.6.9.1", sel))
	waitEndpoints(t, c, other, "sentinel", "ready", func(ep *corev1.Endpoints) bool { return ep != nil && len(testobj.ReadyIPs(ep)) == 1 })
	second.WaitQueuesIdle(30*time.Second, endpoints.QueueName)
	if after := controllerWrites(t, ns); after != before {
		t.Fatalf("restart over correct state wrote %d times, want 0", after-before)
	}
}

func TestLeaderElectionHandover(t *testing.T) {
	testenv.Require(t, env)
	c := env.Client(t)
	ctx := context.Background()

	// Default timings (15s lease, 10s renew, 2s retry) for the graceful handover.
	a := env.StartLeading(t, controller, "a", "--leader-elect-resource-name=endpoints-controller")
	b := env.Start(t, controller, "b", "--leader-elect-resource-name=endpoints-controller")
	// The standby is Ready too (it serves health and metrics) but does not lead or work.
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		code, _ := b.Get("/readyz")
		return code == http.StatusOK, nil
	}); err != nil {
		t.Fatalf("standby not Ready: %v", err)
	}

	ns := env.Namespace(t)
	sel := map[string]string{"app": "le"}
	createService(t, c, makeService(ns, "le", sel))
	createPod(t, c, makePod(ns, "p", "10.7.0.1", sel))
	waitEndpoints(t, c, ns, "le", "ready", func(ep *corev1.Endpoints) bool { return ep != nil && len(testobj.ReadyIPs(ep)) == 1 })
	if !a.IsLeader(controller.Lease()) || b.IsLeader(controller.Lease()) {
		t.Fatalf("leader status: a=%v b=%v, want exactly a", a.IsLeader(controller.Lease()), b.IsLeader(controller.Lease()))
	}
	if got := b.Metric(`kcm_split_reconcile_total{controller="endpoints-controller",result="success"}`); got > 0 {
		t.Fatalf("standby reconciled %v times", got)
	}
	if got := a.Metric(`kcm_split_reconcile_total{controller="endpoints-controller",result="success"}`); got < 1 {
		t.Fatalf("leader reconciled %v times", got)
	}

	// SIGTERM: a drains, releases the Lease, and b takes over within 5s.
	start := time.Now()
	a.Stop(30 * time.Second)
	if code := a.ExitCode(); code != 0 {
		t.Fatalf("leader exit code after SIGTERM = %d, want 0", code)
	}
	// The handover time is reported, not asserted (a loaded CI machine stretches it; the
	// benchmarks measure speed): the bound only keeps a broken handover from hanging the test.
	b.WaitLeadingAndSynced(controller.Lease(), testenv.LeadTimeout)
	t.Logf("SIGTERM handover took %s", time.Since(start).Round(time.Millisecond))
	lease, err := c.CoordinationV1().Leases("kube-system").Get(ctx, controller.Lease(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if lease.Spec.HolderIdentity == nil || !strings.Contains(*lease.Spec.HolderIdentity, "_") {
		t.Fatalf("holder identity %v is not <hostname>_<uuid>", lease.Spec.HolderIdentity)
	}

	// The new leader acts on changes.
	createPod(t, c, makePod(ns, "q", "10.7.0.2", sel))
	waitEndpoints(t, c, ns, "le", "two ready", func(ep *corev1.Endpoints) bool { return ep != nil && len(testobj.ReadyIPs(ep)) == 2 })
}

func TestLeaderElectionSIGKILL(t *testing.T) {
	testenv.Require(t, env)
	const lease, leaseDuration = "endpoints-sigkill", 4 * time.Second
	args := []string{"--leader-elect-resource-name=" + lease,
		"--leader-elect-lease-duration=" + leaseDuration.String(), "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=250ms"}
	a := env.Start(t, controller, "a", args...)
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return a.IsLeader(lease), nil
	}); err != nil {
		t.Fatal("a never led")
	}
	b := env.Start(t, controller, "b", args...)
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return b.Metric(`leader_election_master_status{name="`+lease+`"}`) == 0, nil
	}); err != nil {
		t.Fatal("b never became a standby")
	}

	c := env.Client(t)
	ctx := context.Background()
	start := time.Now()
	a.Kill()
	<-a.Done()
	// a is dead, so the Lease now holds its last renewal for good.
	last, err := c.CoordinationV1().Leases("kube-system").Get(ctx, lease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if last.Spec.RenewTime == nil || last.Spec.HolderIdentity == nil {
		t.Fatalf("lease after the kill has no holder or renew time: %+v", last.Spec)
	}
	// No release happens: b must take over, and only once the Lease has expired. The time
	// it took is reported, not asserted; the bound only keeps a broken takeover from hanging
	// the test.
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, testenv.LeadTimeout, true, func(context.Context) (bool, error) {
		return b.IsLeader(lease), nil
	}); err != nil {
		t.Fatal("b never took over after the leader was killed")
	}
	t.Logf("SIGKILL handover took %s (lease %s)", time.Since(start).Round(time.Millisecond), leaseDuration)
	now, err := c.CoordinationV1().Leases("kube-system").Get(ctx, lease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if now.Spec.HolderIdentity == nil || *now.Spec.HolderIdentity == *last.Spec.HolderIdentity || now.Spec.AcquireTime == nil {
		t.Fatalf("lease after takeover: holder %v (killed leader %q), acquire time %v", now.Spec.HolderIdentity, *last.Spec.HolderIdentity, now.Spec.AcquireTime)
	}
	// Safety: two leaders at once is the failure that matters. b may acquire only after the
	// killed leader's last renewal has expired (both processes share this machine's clock).
	if gap := now.Spec.AcquireTime.Sub(last.Spec.RenewTime.Time); gap < leaseDuration {
		t.Fatalf("b acquired %s after the last renewal, before the %s lease expired", gap, leaseDuration)
	}
}

// TestBadFlagsExit2 runs the shipped binary with bad values: each exits 2 with one line that
// names the flag, before touching the apiserver.
func TestBadFlagsExit2(t *testing.T) {
	bin := controller.Path(t)
	for _, tc := range []struct {
		args []string
		env  string
		want string
	}{
		{[]string{"--concurrent-endpoint-syncs=0"}, "", "--concurrent-endpoint-syncs"},
		{[]string{"--endpoint-updates-batch-period=-1s"}, "", "--endpoint-updates-batch-period"},
		{[]string{"--kube-api-qps=-1"}, "", "--kube-api-qps"},
		{[]string{"--leader-elect-renew-deadline=20s"}, "", "--leader-elect-renew-deadline"},
		{[]string{"--log-format=xml"}, "", "--log-format"},
		{[]string{"--kubeconfig=/nonexistent/kubeconfig"}, "", "--kubeconfig"},
		{nil, "KCM_SPLIT_CONCURRENT_ENDPOINT_SYNCS=-3", "--concurrent-endpoint-syncs"},
		{[]string{"--max-endpoints-per-slice=1001"}, "", "--max-endpoints-per-slice"},
		{[]string{"--controllers=*,-garbage-collector-controller"}, "", "garbage-collector-controller"},
		{[]string{"--mirroring-max-endpoints-per-subset=0"}, "", "--mirroring-max-endpoints-per-subset"},
		{[]string{"--shards=0"}, "", "--shards"},
		{[]string{"--shards=2", "--shard-index=2"}, "", "--shard-index"},
		{[]string{"--shard-index=-1"}, "", "--shard-index"},
	} {
		t.Run(strings.Join(append(tc.args, tc.env), " "), func(t *testing.T) {
			cmd := exec.Command(bin, tc.args...)
			cmd.Env = os.Environ()
			if tc.env != "" {
				cmd.Env = append(cmd.Env, tc.env)
			}
			out, err := cmd.CombinedOutput()
			lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
			if cmd.ProcessState.ExitCode() != 2 || len(lines) != 1 || !strings.Contains(lines[0], tc.want) {
				t.Fatalf("exit %d (%v), output %q; want exit 2 and one line naming %s", cmd.ProcessState.ExitCode(), err, out, tc.want)
			}
		})
	}
}
