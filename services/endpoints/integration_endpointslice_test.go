package endpointscontroller_test

// Integration tests of the EndpointSlice controller in the endpoints-controller binary,
// against the real apiserver; writes are counted from the audit log.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/kcm-split/kcm-split/services/endpoints/endpointslice"
	"github.com/kcm-split/kcm-split/services/endpoints/internal/testobj"
	"github.com/kcm-split/kcm-split/shared/testenv"
)

// listManaged returns the EndpointSlices of Service ns/svc whose managed-by label is
// managedBy, in the order cmp gives them.
func listManaged(t *testing.T, c kubernetes.Interface, ns, svc, managedBy string, cmp func(a, b discovery.EndpointSlice) int) []discovery.EndpointSlice {
	t.Helper()
	list, err := c.DiscoveryV1().EndpointSlices(ns).List(context.Background(), metav1.ListOptions{
		LabelSelector: labels.Set{discovery.LabelServiceName: svc, discovery.LabelManagedBy: managedBy}.String(),
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.SortStableFunc(list.Items, cmp)
	return list.Items
}

// waitListed polls list until cond holds for the slices it returns, and returns them; what
// they are (kind and Service) and what cond waits for name the failure.
func waitListed(t *testing.T, list func() []discovery.EndpointSlice, which, what string, cond func([]discovery.EndpointSlice) bool) []discovery.EndpointSlice {
	t.Helper()
	var last []discovery.EndpointSlice
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		last = list()
		return cond(last), nil
	})
	if err != nil {
		t.Fatalf("%s never became %s; last: %s", which, what, describeSlices(last))
	}
	return last
}

// listSlices returns the EndpointSlices of Service ns/svc managed by this controller (and
// upstream's: they share the managed-by value), sorted by size, largest first.
func listSlices(t *testing.T, c kubernetes.Interface, ns, svc string) []discovery.EndpointSlice {
	t.Helper()
	return listManaged(t, c, ns, svc, endpointslice.ManagedBy, func(a, b discovery.EndpointSlice) int {
		return len(b.Endpoints) - len(a.Endpoints)
	})
}

// waitSlices polls until cond holds for the Service's slices and returns them.
func waitSlices(t *testing.T, c kubernetes.Interface, ns, svc, what string, cond func([]discovery.EndpointSlice) bool) []discovery.EndpointSlice {
	t.Helper()
	return waitListed(t, func() []discovery.EndpointSlice { return listSlices(t, c, ns, svc) }, "EndpointSlices of "+ns+"/"+svc, what, cond)
}

func describeSlices(ss []discovery.EndpointSlice) string {
	var b strings.Builder
	for _, s := range ss {
		fmt.Fprintf(&b, "[%s %s endpoints=%d ready=%d ports=%d labels=%v] ", s.Name, s.AddressType, len(s.Endpoints), countReady(s), len(s.Ports), s.Labels)
	}
	return b.String()
}

func countReady(s discovery.EndpointSlice) int {
	n := 0
	for _, e := range s.Endpoints {
		if e.Conditions.Ready != nil && *e.Conditions.Ready {
			n++
		}
	}
	return n
}

func sizes(ss []discovery.EndpointSlice) []int {
	out := make([]int, len(ss))
	for i, s := range ss {
		out[i] = len(s.Endpoints)
	}
	return out
}

// sliceWrites returns the controller's EndpointSlice writes in ns received after since.
func sliceWrites(t *testing.T, ns string, since time.Time) []testenv.AuditEvent {
	t.Helper()
	evs, err := env.Writes(testenv.ByUserAgentPrefix(controller.UserAgentPrefix(), "endpointslices"), testenv.ReceivedAfter(since))
	if err != nil {
		t.Fatal(err)
	}
	var out []testenv.AuditEvent
	for _, ev := range evs {
		if ev.ObjectRef.Namespace == ns {
			out = append(out, ev)
		}
	}
	return out
}

func describeWrites(evs []testenv.AuditEvent) string {
	var b strings.Builder
	for _, ev := range evs {
		fmt.Fprintf(&b, "%s %s %d; ", ev.Verb, ev.ObjectRef.Name, ev.ResponseStatus.Code)
	}
	return b.String()
}

// sliceQueueDrained waits until a Service created now in a namespace of its own has its slice
// (so every event before it was seen) and the slice queue is empty with nothing in flight
// (so every sync they caused is done). Only then does a count of writes show that nothing
// more is coming.
func sliceQueueDrained(t *testing.T, c kubernetes.Interface, ctrl *testenv.Controller) {
	t.Helper()
	ns := env.Namespace(t)
	sel := map[string]string{"app": "sentinel"}
	createService(t, c, makeService(ns, "sentinel", sel))
	createPod(t, c, makePod(ns, "s", "10.9.9.9", sel))
	waitSlices(t, c, ns, "sentinel", "one ready endpoint", func(ss []discovery.EndpointSlice) bool {
		return len(ss) == 1 && countReady(ss[0]) == 1
	})
	ctrl.WaitQueuesIdle(time.Minute, endpointslice.QueueName)
}

// TestSlicesOf250PodsFlipAndWarmRestart: 250 ready Pods make slices of 100, 100 and 50 in
// three creates; one readiness flip is one slice write; a restart over that state writes
// nothing.
func TestSlicesOf250PodsFlipAndWarmRestart(t *testing.T) {
	testenv.Require(t, env)
	c := env.Client(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	sel := map[string]string{"app": "big"}
	createPods(t, c, ns, 250, sel)
	first := env.StartLeading(t, controller, "first")
	start := time.Now()
	svc := createService(t, c, makeService(ns, "big", sel))

	ss := waitSlices(t, c, ns, "big", "100/100/50, all ready", func(ss []discovery.EndpointSlice) bool {
		return slices.Equal(sizes(ss), []int{100, 100, 50}) && countReady(ss[0])+countReady(ss[1])+countReady(ss[2]) == 250
	})
	for _, s := range ss {
		if s.AddressType != discovery.AddressTypeIPv4 || len(s.Ports) != 1 || *s.Ports[0].Port != 8080 || *s.Ports[0].Name != "http" {
			t.Fatalf("slice %s: addressType %s ports %v", s.Name, s.AddressType, s.Ports)
		}
		if s.Labels["team"] != "web" || !strings.HasPrefix(s.Name, "big-") {
			t.Fatalf("slice %s: labels %v; want the Service's labels and a name after it", s.Name, s.Labels)
		}
		if ref := metav1.GetControllerOf(&s); ref == nil || ref.Kind != "Service" || ref.Name != "big" || ref.UID != svc.UID {
			t.Fatalf("slice %s: controller reference %+v", s.Name, ref)
		}
		if _, err := time.Parse(time.RFC3339Nano, s.Annotations[corev1.EndpointsLastChangeTriggerTime]); err != nil {
			t.Fatalf("slice %s: last-change-trigger-time: %v", s.Name, err)
		}
		for _, e := range s.Endpoints {
			if e.NodeName == nil || *e.NodeName != "node-1" || e.TargetRef == nil || e.TargetRef.Kind != "Pod" || e.TargetRef.UID == "" ||
				e.Conditions.Serving == nil || !*e.Conditions.Serving || e.Conditions.Terminating == nil || *e.Conditions.Terminating {
				t.Fatalf("slice %s: endpoint %+v", s.Name, e)
			}
		}
	}
	if w := sliceWrites(t, ns, start); len(w) != 3 {
		t.Fatalf("cold sync made %d slice writes, want 3 creates: %s", len(w), describeWrites(w))
	}
	if got := first.Metric(`endpoint_slice_controller_changes{operation="create"}`); got < 3 {
		t.Fatalf("endpoint_slice_controller_changes{operation=\"create\"} = %v, want at least 3", got)
	}
	if got := first.Metric(`endpoint_slice_controller_num_endpoint_slices`); got < 3 {
		t.Fatalf("endpoint_slice_controller_num_endpoint_slices = %v, want at least 3", got)
	}

	// One readiness flip: one slice rewritten, the others untouched.
	flip := time.Now()
	p, err := c.CoreV1().Pods(ns).Get(ctx, "p-0007", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	setReady(p, false)
	if _, err := c.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitSlices(t, c, ns, "big", "249 ready", func(ss []discovery.EndpointSlice) bool {
		n := 0
		for _, s := range ss {
			n += countReady(s)
		}
		return len(ss) == 3 && n == 249
	})
	sliceQueueDrained(t, c, first)
	if w := sliceWrites(t, ns, flip); len(w) != 1 || w[0].Verb != "update" {
		t.Fatalf("one readiness flip made %d slice writes, want 1 update: %s", len(w), describeWrites(w))
	}

	// Warm restart: every Service is synced again, from slices that are right.
	first.Stop(30 * time.Second)
	restart := time.Now()
	second := env.StartLeading(t, controller, "second")
	sliceQueueDrained(t, c, second)
	if got := second.Metric(`endpoint_slice_controller_syncs{result="success"}`); got < 2 {
		t.Fatalf("restarted controller synced %v Services, want every one", got)
	}
	if w := sliceWrites(t, ns, restart); len(w) != 0 {
		t.Fatalf("warm restart made %d slice writes, want 0: %s", len(w), describeWrites(w))
	}
}

// upstreamSlice is an EndpointSlice as kube-controller-manager writes it for Service svc
// with the given Pods (ready, on node-1, port http 8080).
func upstreamSlice(svc *corev1.Service, name string, pods ...*corev1.Pod) *discovery.EndpointSlice {
	s := &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: svc.Namespace, Name: name,
			Labels: map[string]string{
				discovery.LabelServiceName: svc.Name,
				discovery.LabelManagedBy:   "endpointslice-controller.k8s.io",
				"team":                     "web",
			},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(svc, corev1.SchemeGroupVersion.WithKind("Service"))},
		},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: new("http"), Port: new(int32(8080)), Protocol: new(corev1.ProtocolTCP)}},
	}
	for _, p := range pods {
		s.Endpoints = append(s.Endpoints, discovery.Endpoint{
			Addresses:  []string{p.Status.PodIP},
			Conditions: discovery.EndpointConditions{Ready: new(true), Serving: new(true), Terminating: new(false)},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID},
			NodeName:   new(p.Spec.NodeName),
		})
	}
	return s
}

// TestAdoptsUpstreamSlices: slices kube-controller-manager left behind are this controller's
// own. One that is right is not written; one that is wrong is corrected in place; none is
// duplicated.
func TestAdoptsUpstreamSlices(t *testing.T) {
	testenv.Require(t, env)
	c := env.Client(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	sel := map[string]string{"app": "adopt"}
	svc := createService(t, c, makeService(ns, "adopt", sel))
	var pods []*corev1.Pod
	for i := range 4 {
		pods = append(pods, createPod(t, c, makePod(ns, fmt.Sprintf("p%d", i), fmt.Sprintf("10.8.0.%d", i+1), sel)))
	}
	ghost := makePod(ns, "ghost", "10.8.0.99", sel) // gone since upstream last wrote
	ghost.UID = "ghost-uid"
	right, err := c.DiscoveryV1().EndpointSlices(ns).Create(ctx, upstreamSlice(svc, "adopt-kcm1", pods[0], pods[1], pods[2]), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.DiscoveryV1().EndpointSlices(ns).Create(ctx, upstreamSlice(svc, "adopt-kcm2", pods[3], ghost), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	ctrl := env.StartLeading(t, controller, "ctrl")
	ss := waitSlices(t, c, ns, "adopt", "4 ready endpoints without the ghost", func(ss []discovery.EndpointSlice) bool {
		n := 0
		for _, s := range ss {
			for _, e := range s.Endpoints {
				if e.Addresses[0] == "10.8.0.99" {
					return false
				}
			}
			n += countReady(s)
		}
		return n == 4
	})
	sliceQueueDrained(t, c, ctrl)
	if len(ss) != 2 {
		t.Fatalf("got %d slices, want the 2 adopted: %s", len(ss), describeSlices(ss))
	}
	now, err := c.DiscoveryV1().EndpointSlices(ns).Get(ctx, "adopt-kcm1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if now.ResourceVersion != right.ResourceVersion {
		t.Fatalf("the slice that was right was rewritten (resourceVersion %s to %s)", right.ResourceVersion, now.ResourceVersion)
	}
	w := sliceWrites(t, ns, start)
	if len(w) != 1 || w[0].ObjectRef.Name != "adopt-kcm2" || w[0].Verb != "update" {
		t.Fatalf("adoption made writes %s; want one update of adopt-kcm2", describeWrites(w))
	}
}

// TestDualStackSlices: a dual-stack Service gets one slice set per family.
func TestDualStackSlices(t *testing.T) {
	c, ns := withController(t)
	sel := map[string]string{"app": "dual"}
	svc := makeService(ns, "dual", sel)
	svc.Spec.IPFamilyPolicy = new(corev1.IPFamilyPolicyRequireDualStack)
	svc.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	createService(t, c, svc)
	for i := range 3 {
		p := makePod(ns, fmt.Sprintf("p%d", i), fmt.Sprintf("10.10.0.%d", i+1), sel)
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: fmt.Sprintf("fd00:10::%d", i+1)})
		createPod(t, c, p)
	}
	ss := waitSlices(t, c, ns, "dual", "one IPv4 and one IPv6 slice of 3", func(ss []discovery.EndpointSlice) bool {
		return len(ss) == 2 && countReady(ss[0]) == 3 && countReady(ss[1]) == 3
	})
	families := map[discovery.AddressType]string{}
	for _, s := range ss {
		var addrs []string
		for _, e := range s.Endpoints {
			addrs = append(addrs, e.Addresses...)
		}
		sort.Strings(addrs)
		families[s.AddressType] = strings.Join(addrs, ",")
	}
	if families[discovery.AddressTypeIPv4] != "10.10.0.1,10.10.0.2,10.10.0.3" || families[discovery.AddressTypeIPv6] != "fd00:10::1,fd00:10::2,fd00:10::3" {
		t.Fatalf("addresses by family: %v", families)
	}
}

// TestHeadlessAndSelectorlessSlices: a headless Service gets slices (without ports, with
// hostnames, not-ready Pods published if it asks); a Service without a selector gets none
// from this controller, and the slices its owner writes are left alone.
func TestHeadlessAndSelectorlessSlices(t *testing.T) {
	testenv.Require(t, env)
	c := env.Client(t)
	ns := env.Namespace(t)
	ctrl := env.StartLeading(t, controller, "ctrl")
	ctx := context.Background()
	sel := map[string]string{"app": "db"}
	headless := makeService(ns, "db", sel)
	headless.Spec.ClusterIP = corev1.ClusterIPNone
	headless.Spec.Ports = nil
	headless.Spec.PublishNotReadyAddresses = true
	createService(t, c, headless)
	createPod(t, c, makePod(ns, "db-0", "10.11.0.1", sel, withHostname("db-0", "db")))
	createPod(t, c, makePod(ns, "db-1", "10.11.0.2", sel, withHostname("db-1", "db"), notReady()))
	ss := waitSlices(t, c, ns, "db", "2 endpoints, published ready", func(ss []discovery.EndpointSlice) bool {
		return len(ss) == 1 && countReady(ss[0]) == 2
	})
	if len(ss[0].Ports) != 0 {
		t.Fatalf("headless slice has ports %v", ss[0].Ports)
	}
	for _, e := range ss[0].Endpoints {
		if e.Hostname == nil || *e.Hostname != e.TargetRef.Name {
			t.Fatalf("endpoint %+v lacks its hostname", e)
		}
		if e.TargetRef.Name == "db-1" && (e.Conditions.Serving == nil || *e.Conditions.Serving) {
			t.Fatalf("the not-ready Pod is published ready but must not be serving: %+v", e.Conditions)
		}
	}

	// No selector: the owner's slices are its own.
	createService(t, c, makeService(ns, "external", nil))
	own := &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "external-1", Labels: map[string]string{
			discovery.LabelServiceName: "external", discovery.LabelManagedBy: "someone-else"}},
		AddressType: discovery.AddressTypeIPv4,
		Endpoints:   []discovery.Endpoint{{Addresses: []string{"192.0.2.10"}}},
	}
	created, err := c.DiscoveryV1().EndpointSlices(ns).Create(ctx, own, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sliceQueueDrained(t, c, ctrl)
	if ss := listSlices(t, c, ns, "external"); len(ss) != 0 {
		t.Fatalf("a Service without a selector got slices: %s", describeSlices(ss))
	}
	now, err := c.DiscoveryV1().EndpointSlices(ns).Get(ctx, "external-1", metav1.GetOptions{})
	if err != nil || now.ResourceVersion != created.ResourceVersion {
		t.Fatalf("the owner's slice was touched: %v (resourceVersion %s to %s)", err, created.ResourceVersion, now.ResourceVersion)
	}
}

// TestControllersFlag: --controllers runs either controller alone, kube-controller-manager's
// names and aliases.
func TestControllersFlag(t *testing.T) {
	testenv.Require(t, env)
	c := env.Client(t)
	ns := env.Namespace(t)
	ctx := context.Background()

	slicesOnly := env.StartLeading(t, controller, "slices-only", "--controllers=*,-endpoint")
	sel := map[string]string{"app": "one"}
	createService(t, c, makeService(ns, "one", sel))
	createPod(t, c, makePod(ns, "one", "10.12.0.1", sel))
	waitSlices(t, c, ns, "one", "one ready endpoint", func(ss []discovery.EndpointSlice) bool { return len(ss) == 1 && countReady(ss[0]) == 1 })
	sliceQueueDrained(t, c, slicesOnly)
	if _, err := c.CoreV1().Endpoints(ns).Get(ctx, "one", metav1.GetOptions{}); err == nil || slicesOnly.Metric(`workqueue_depth{name="endpoint"}`) != -1 {
		t.Fatalf("with the endpoints controller off, Endpoints were written (%v) or its queue exists", err)
	}
	slicesOnly.Stop(30 * time.Second)

	endpointsOnly := env.StartLeading(t, controller, "endpoints-only", "--controllers=endpoints-controller")
	sel = map[string]string{"app": "two"}
	createService(t, c, makeService(ns, "two", sel))
	createPod(t, c, makePod(ns, "two", "10.12.0.2", sel))
	waitEndpoints(t, c, ns, "two", "ready", func(ep *corev1.Endpoints) bool { return ep != nil && len(testobj.ReadyIPs(ep)) == 1 })
	waitEndpoints(t, c, ns, "one", "written now", func(ep *corev1.Endpoints) bool { return ep != nil && len(testobj.ReadyIPs(ep)) == 1 })
	if ss := listSlices(t, c, ns, "two"); len(ss) != 0 || endpointsOnly.Metric(`workqueue_depth{name="endpoint_slice"}`) != -1 {
		t.Fatalf("with the EndpointSlice controller off, slices were written (%s) or its queue exists", describeSlices(ss))
	}
}

// TestRestartMidUpdateLeavesNoDuplicates: the leader is killed while it rewrites a Service's
// slices after a churn of its Pods (some gone, others new, some flipping readiness); its
// successor ends with every endpoint in exactly one slice and none left over.
// Over 80 lines: one scenario on a real apiserver, each step building on the state the last left.
func TestRestartMidUpdateLeavesNoDuplicates(t *testing.T) {
	testenv.Require(t, env)
	c := env.Client(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	sel := map[string]string{"app": "churn"}
	createPods(t, c, ns, 150, sel)
	first := env.StartLeading(t, controller, "first")
	createService(t, c, makeService(ns, "churn", sel))
	waitSlices(t, c, ns, "churn", "100/50, all ready", func(ss []discovery.EndpointSlice) bool {
		return slices.Equal(sizes(ss), []int{100, 50}) && countReady(ss[0])+countReady(ss[1]) == 150
	})

	// The churn: 60 Pods go, 60 new ones come, 20 of those that stay turn not ready.
	churn := time.Now()
	done := make(chan error, 1)
	go func() {
		var errs []error
		for i := range 60 {
			if err := c.CoreV1().Pods(ns).Delete(ctx, fmt.Sprintf("p-%04d", i), *metav1.NewDeleteOptions(0)); err != nil {
				errs = append(errs, err)
			}
			p := makePod(ns, fmt.Sprintf("q-%04d", i), fmt.Sprintf("10.110.0.%d", i+1), sel)
			status := p.Status
			created, err := c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
			if err != nil {
				errs = append(errs, err)
				continue
			}
			created.Status = status
			if _, err := c.CoreV1().Pods(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
				errs = append(errs, err)
			}
		}
		for i := 100; i < 120; i++ {
			p, err := c.CoreV1().Pods(ns).Get(ctx, fmt.Sprintf("p-%04d", i), metav1.GetOptions{})
			if err == nil {
				setReady(p, false)
				_, err = c.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
			}
			if err != nil {
				errs = append(errs, err)
			}
		}
		done <- errors.Join(errs...)
	}()
	// Killed (no drain, no release) as soon as it has written for the churn.
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return len(sliceWrites(t, ns, churn)) > 0, nil
	}); err != nil {
		t.Fatal("the leader never wrote after the churn began")
	}
	first.Kill()
	<-first.Done()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	second := env.StartLeading(t, controller, "second")
	waitSlices(t, c, ns, "churn", "150 endpoints, 130 ready", func(ss []discovery.EndpointSlice) bool {
		n, ready := 0, 0
		for _, s := range ss {
			n += len(s.Endpoints)
			ready += countReady(s)
		}
		return n == 150 && ready == 130
	})
	sliceQueueDrained(t, c, second)
	ss := listSlices(t, c, ns, "churn")
	seen := map[string]string{}
	for _, s := range ss {
		for _, e := range s.Endpoints {
			if other, dup := seen[e.Addresses[0]]; dup {
				t.Fatalf("%s is in slices %s and %s: %s", e.Addresses[0], other, s.Name, describeSlices(ss))
			}
			seen[e.Addresses[0]] = s.Name
			if e.TargetRef == nil || strings.HasPrefix(e.TargetRef.Name, "p-00") && e.TargetRef.Name < "p-0060" {
				t.Fatalf("endpoint %+v is of a deleted Pod", e)
			}
		}
	}
	if len(seen) != 150 {
		t.Fatalf("%d distinct endpoints, want 150: %s", len(seen), describeSlices(ss))
	}
}
