package endpointscontroller_test

// Integration tests of the EndpointSlice mirroring controller in the endpoints-controller
// binary, against the real apiserver; writes are counted from the audit log.

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/kcm-split/kcm-split/services/endpoints/internal/testobj"
	"github.com/kcm-split/kcm-split/services/endpoints/mirroring"
	"github.com/kcm-split/kcm-split/shared/testenv"
)

// listMirrored returns the mirrored EndpointSlices of ns/name, sorted by address type.
func listMirrored(t *testing.T, c kubernetes.Interface, ns, name string) []discovery.EndpointSlice {
	t.Helper()
	return listManaged(t, c, ns, name, mirroring.ManagedBy, func(a, b discovery.EndpointSlice) int {
		return strings.Compare(string(a.AddressType), string(b.AddressType))
	})
}

func waitMirrored(t *testing.T, c kubernetes.Interface, ns, name, what string, cond func([]discovery.EndpointSlice) bool) []discovery.EndpointSlice {
	t.Helper()
	return waitListed(t, func() []discovery.EndpointSlice { return listMirrored(t, c, ns, name) }, "mirrored slices of "+ns+"/"+name, what, cond)
}

// addressesOf returns "ip:ready" for every endpoint of the slices, sorted.
func addressesOf(ss []discovery.EndpointSlice) []string {
	var out []string
	for _, s := range ss {
		for _, e := range s.Endpoints {
			out = append(out, fmt.Sprintf("%s:%v", e.Addresses[0], e.Conditions.Ready != nil && *e.Conditions.Ready))
		}
	}
	sort.Strings(out)
	return out
}

func customEndpoints(ns, name string, ready, notReady []string, extraLabels map[string]string) *corev1.Endpoints {
	ep := &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"team": "ext"}},
		Subsets: []corev1.EndpointSubset{{
			Ports: []corev1.EndpointPort{{Name: "http", Port: 8080, Protocol: corev1.ProtocolTCP}},
		}},
	}
	for k, v := range extraLabels {
		ep.Labels[k] = v
	}
	for _, ip := range ready {
		ep.Subsets[0].Addresses = append(ep.Subsets[0].Addresses, corev1.EndpointAddress{IP: ip})
	}
	for _, ip := range notReady {
		ep.Subsets[0].NotReadyAddresses = append(ep.Subsets[0].NotReadyAddresses, corev1.EndpointAddress{IP: ip})
	}
	return ep
}

func createEndpoints(t *testing.T, c kubernetes.Interface, ep *corev1.Endpoints) *corev1.Endpoints {
	t.Helper()
	out, err := c.CoreV1().Endpoints(ep.Namespace).Create(context.Background(), ep, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create endpoints %s: %v", ep.Name, err)
	}
	return out
}

// mirrorQueueDrained waits until custom Endpoints created now in a namespace of their own are
// mirrored (so every event before them was seen) and the mirroring queue is empty with
// nothing in flight.
func mirrorQueueDrained(t *testing.T, c kubernetes.Interface, ctrl *testenv.Controller) {
	t.Helper()
	ns := env.Namespace(t)
	createService(t, c, makeService(ns, "sentinel", nil))
	createEndpoints(t, c, customEndpoints(ns, "sentinel", []string{"192.0.2.200"}, nil, nil))
	waitMirrored(t, c, ns, "sentinel", "one ready endpoint", func(ss []discovery.EndpointSlice) bool {
		return len(ss) == 1 && countReady(ss[0]) == 1
	})
	ctrl.WaitQueuesIdle(time.Minute, mirroring.QueueName)
}

// TestMirrorCustomEndpoints: custom Endpoints of a Service without a selector are mirrored
// (one slice per family, the Endpoints' labels, owned by it), updates and deletion follow in
// one write each, the skip-mirror label and leader-election locks are honoured, and the
// Endpoints of a Service with a selector are never mirrored. A restart writes nothing.
// Over 80 lines: one scenario on a real apiserver, each step building on the state the last left.
func TestMirrorCustomEndpoints(t *testing.T) {
	testenv.Require(t, env)
	c := env.Client(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	first := env.StartLeading(t, controller, "first")
	start := time.Now()

	createService(t, c, makeService(ns, "ext", nil))
	ep := createEndpoints(t, c, customEndpoints(ns, "ext", []string{"192.0.2.1", "192.0.2.2", "2001:db8::1"}, []string{"192.0.2.3"}, nil))
	ss := waitMirrored(t, c, ns, "ext", "an IPv4 slice of 3 and an IPv6 slice of 1", func(ss []discovery.EndpointSlice) bool {
		return len(ss) == 2 && len(ss[0].Endpoints) == 3 && len(ss[1].Endpoints) == 1
	})
	if got := addressesOf(ss); !slices.Equal(got, []string{"192.0.2.1:true", "192.0.2.2:true", "192.0.2.3:false", "2001:db8::1:true"}) {
		t.Fatalf("mirrored addresses %v", got)
	}
	for _, s := range ss {
		if s.Labels["team"] != "ext" || !strings.HasPrefix(s.Name, "ext-") || len(s.Ports) != 1 || *s.Ports[0].Port != 8080 {
			t.Fatalf("slice %s: labels %v ports %v", s.Name, s.Labels, s.Ports)
		}
		if ref := metav1.GetControllerOf(&s); ref == nil || ref.Kind != "Endpoints" || ref.UID != ep.UID {
			t.Fatalf("slice %s: controller reference %+v", s.Name, ref)
		}
	}

	// Skipped: a leader-election lock and Endpoints labelled skip-mirror, both of selector-less
	// Services; and the Endpoints our endpoints controller writes for a Service with a selector
	// (in a namespace of its own, so that its slice writes are counted apart).
	createService(t, c, makeService(ns, "lock", nil))
	lock := customEndpoints(ns, "lock", []string{"192.0.2.50"}, nil, nil)
	lock.Annotations = map[string]string{"control-plane.alpha.kubernetes.io/leader": `{"holderIdentity":"x"}`}
	createEndpoints(t, c, lock)
	createService(t, c, makeService(ns, "skipped", nil))
	createEndpoints(t, c, customEndpoints(ns, "skipped", []string{"192.0.2.60"}, nil, map[string]string{discovery.LabelSkipMirror: "true"}))
	sel := map[string]string{"app": "web"}
	webNS := env.Namespace(t)
	createService(t, c, makeService(webNS, "web", sel))
	createPod(t, c, makePod(webNS, "web-0", "10.20.0.1", sel))
	waitEndpoints(t, c, webNS, "web", "ready", func(ep *corev1.Endpoints) bool { return ep != nil && len(testobj.ReadyIPs(ep)) == 1 })
	waitSlices(t, c, webNS, "web", "one ready endpoint", func(ss []discovery.EndpointSlice) bool { return len(ss) == 1 && countReady(ss[0]) == 1 })
	mirrorQueueDrained(t, c, first)
	for _, name := range []string{"lock", "skipped"} {
		if ss := listMirrored(t, c, ns, name); len(ss) != 0 {
			t.Fatalf("%s was mirrored: %s", name, describeSlices(ss))
		}
	}
	if ss := listMirrored(t, c, webNS, "web"); len(ss) != 0 {
		t.Fatalf("the endpoints controller's Endpoints were mirrored: %s", describeSlices(ss))
	}
	if w := sliceWrites(t, ns, start); len(w) != 2 {
		t.Fatalf("%d slice writes, want the 2 mirrored creates: %s", len(w), describeWrites(w))
	}
	if got := first.Metric(`endpoint_slice_mirroring_controller_changes{operation="create"}`); got < 2 {
		t.Fatalf(`endpoint_slice_mirroring_controller_changes{operation="create"} = %v, want at least 2`, got)
	}

	// An update of the IPv4 addresses rewrites the IPv4 slice alone.
	update := time.Now()
	cur, err := c.CoreV1().Endpoints(ns).Get(ctx, "ext", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Subsets[0].Addresses = append(cur.Subsets[0].Addresses, corev1.EndpointAddress{IP: "192.0.2.4"})
	if _, err := c.CoreV1().Endpoints(ns).Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitMirrored(t, c, ns, "ext", "4 IPv4 endpoints", func(ss []discovery.EndpointSlice) bool { return len(ss) == 2 && len(ss[0].Endpoints) == 4 })
	mirrorQueueDrained(t, c, first)
	if w := sliceWrites(t, ns, update); len(w) != 1 || w[0].Verb != "update" {
		t.Fatalf("one added address made slice writes %s; want one update", describeWrites(w))
	}

	// Warm restart: nothing to write.
	first.Stop(30 * time.Second)
	restart := time.Now()
	second := env.StartLeading(t, controller, "second")
	mirrorQueueDrained(t, c, second)
	if w := sliceWrites(t, ns, restart); len(w) != 0 {
		t.Fatalf("warm restart made %d slice writes, want 0: %s", len(w), describeWrites(w))
	}

	// skip-mirror added: the slices go. Removed again: they come back.
	cur, err = c.CoreV1().Endpoints(ns).Get(ctx, "ext", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Labels[discovery.LabelSkipMirror] = "true"
	if cur, err = c.CoreV1().Endpoints(ns).Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitMirrored(t, c, ns, "ext", "gone after skip-mirror", func(ss []discovery.EndpointSlice) bool { return len(ss) == 0 })
	delete(cur.Labels, discovery.LabelSkipMirror)
	if _, err := c.CoreV1().Endpoints(ns).Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitMirrored(t, c, ns, "ext", "back", func(ss []discovery.EndpointSlice) bool { return len(ss) == 2 })

	// The Service gains a selector: the mirror goes (the endpoints controller owns it now).
	svc, err := c.CoreV1().Services(ns).Get(ctx, "ext", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc.Spec.Selector = map[string]string{"app": "nothing"}
	if _, err := c.CoreV1().Services(ns).Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitMirrored(t, c, ns, "ext", "gone after the selector", func(ss []discovery.EndpointSlice) bool { return len(ss) == 0 })

	// Deleting custom Endpoints deletes their slices.
	createService(t, c, makeService(ns, "gone", nil))
	createEndpoints(t, c, customEndpoints(ns, "gone", []string{"192.0.2.70"}, nil, nil))
	waitMirrored(t, c, ns, "gone", "mirrored", func(ss []discovery.EndpointSlice) bool { return len(ss) == 1 })
	if err := c.CoreV1().Endpoints(ns).Delete(ctx, "gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitMirrored(t, c, ns, "gone", "deleted", func(ss []discovery.EndpointSlice) bool { return len(ss) == 0 })
}

// TestMirrorOverCapacity: a subset past --mirroring-max-endpoints-per-subset is mirrored up
// to the cap, ready addresses first, with upstream's TooManyAddressesToMirror event.
func TestMirrorOverCapacity(t *testing.T) {
	testenv.Require(t, env)
	c := env.Client(t)
	ns := env.Namespace(t)
	env.StartLeading(t, controller, "ctrl", "--mirroring-max-endpoints-per-subset=5")
	createService(t, c, makeService(ns, "big", nil))
	var ready []string
	for i := range 6 {
		ready = append(ready, fmt.Sprintf("192.0.2.%d", 10+i))
	}
	createEndpoints(t, c, customEndpoints(ns, "big", ready, []string{"192.0.2.99", "192.0.2.98"}, nil))
	ss := waitMirrored(t, c, ns, "big", "5 ready endpoints", func(ss []discovery.EndpointSlice) bool {
		return len(ss) == 1 && len(ss[0].Endpoints) == 5 && countReady(ss[0]) == 5
	})
	if got := addressesOf(ss); !slices.Equal(got, []string{"192.0.2.10:true", "192.0.2.11:true", "192.0.2.12:true", "192.0.2.13:true", "192.0.2.14:true"}) {
		t.Fatalf("mirrored %v, want the first 5 ready addresses", got)
	}
	var found *corev1.Event
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		evs, err := c.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for i := range evs.Items {
			e := &evs.Items[i]
			if e.Reason == mirroring.ReasonTooManyAddressesToMirror && e.InvolvedObject.Kind == "Endpoints" && e.InvolvedObject.Name == "big" {
				found = e
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatal("no TooManyAddressesToMirror event on the Endpoints")
	}
	if found.Type != corev1.EventTypeWarning || !strings.Contains(found.Message, "A max of 5 addresses") || !strings.Contains(found.Message, "3 addresses were skipped") ||
		found.Source.Component != mirroring.ComponentName {
		t.Fatalf("event %s %q from %q", found.Type, found.Message, found.Source.Component)
	}
}

// TestMirrorAdoptsUpstreamSlices: slices kube-controller-manager's mirroring controller left
// are adopted: the right one is not rewritten, a duplicate of it is deleted.
func TestMirrorAdoptsUpstreamSlices(t *testing.T) {
	testenv.Require(t, env)
	c := env.Client(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	createService(t, c, makeService(ns, "ext", nil))
	ep := createEndpoints(t, c, customEndpoints(ns, "ext", []string{"192.0.2.1", "192.0.2.2"}, nil, nil))
	upstream := func(name string, ips ...string) *discovery.EndpointSlice {
		s := &discovery.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
				Labels:          map[string]string{discovery.LabelServiceName: "ext", discovery.LabelManagedBy: mirroring.ManagedBy, "team": "ext"},
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(ep, corev1.SchemeGroupVersion.WithKind("Endpoints"))},
			},
			AddressType: discovery.AddressTypeIPv4,
			Ports:       []discovery.EndpointPort{{Name: new("http"), Port: new(int32(8080)), Protocol: new(corev1.ProtocolTCP)}},
		}
		for _, ip := range ips {
			s.Endpoints = append(s.Endpoints, discovery.Endpoint{Addresses: []string{ip}, Conditions: discovery.EndpointConditions{Ready: new(true)}})
		}
		created, err := c.DiscoveryV1().EndpointSlices(ns).Create(ctx, s, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return created
	}
	right := upstream("ext-kcm1", "192.0.2.2", "192.0.2.1")
	upstream("ext-kcm2", "192.0.2.1")

	start := time.Now()
	ctrl := env.StartLeading(t, controller, "ctrl")
	waitMirrored(t, c, ns, "ext", "the right slice alone", func(ss []discovery.EndpointSlice) bool { return len(ss) == 1 })
	mirrorQueueDrained(t, c, ctrl)
	now, err := c.DiscoveryV1().EndpointSlices(ns).Get(ctx, "ext-kcm1", metav1.GetOptions{})
	if err != nil || now.ResourceVersion != right.ResourceVersion {
		t.Fatalf("the right slice was rewritten or deleted: %v", err)
	}
	if w := sliceWrites(t, ns, start); len(w) != 1 || w[0].Verb != "delete" || w[0].ObjectRef.Name != "ext-kcm2" {
		t.Fatalf("adoption made writes %s; want one delete of ext-kcm2", describeWrites(w))
	}
}
