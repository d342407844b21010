package endpointscontroller_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/kcm-split/kcm-split/services/endpoints/endpoints"
	"github.com/kcm-split/kcm-split/services/endpoints/endpointslice"
	"github.com/kcm-split/kcm-split/services/endpoints/internal/testobj"
	"github.com/kcm-split/kcm-split/services/endpoints/mirroring"
	"github.com/kcm-split/kcm-split/shared/foreign"
	"github.com/kcm-split/kcm-split/shared/testenv"
)

// foreignWrites is how many times the second writer rewrites the object in one episode.
const foreignWrites = 4

// rewriteFunc rewrites the fields the controller owns on the object with a content of its own
// (i varies it, so that every write changes them), inputs unchanged.
type rewriteFunc func(ctx context.Context, c kubernetes.Interface, i int) error

// assertOneEpisode has kube-controller-manager (as a KCM left running after a botched switch
// would) rewrite the object foreignWrites times, then kubectl once as a sentinel: once the
// sentinel's Event is there, every earlier write has been seen. Then: exactly one Event and a
// counter of 1 for kube-controller-manager's episode, and the controller's writes on the
// object bounded by the second writer's (it never fights).
func assertOneEpisode(t *testing.T, ctrl *testenv.Controller, c kubernetes.Interface, ns, controllerName, resource, name string, rewrite rewriteFunc) {
	t.Helper()
	ctx := context.Background()
	kcm := env.ClientAs(t, "kube-controller-manager/v1.36.3 (linux/amd64) kubernetes/test")
	human := env.ClientAs(t, "kubectl-edit/v1.36.3 (linux/amd64) kubernetes/test")
	start := time.Now()
	for i := range foreignWrites {
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error { return rewrite(ctx, kcm, i) }); err != nil {
			t.Fatalf("foreign write %d: %v", i, err)
		}
		// managedFields times have whole seconds: each write is seen with a time of its own.
		time.Sleep(1100 * time.Millisecond)
	}
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error { return rewrite(ctx, human, foreignWrites) }); err != nil {
		t.Fatalf("sentinel write: %v", err)
	}
	series := `kcm_split_foreign_writer_detected_total{controller="` + controllerName + `"}`
	var byManager map[string][]corev1.Event
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		byManager = foreignEvents(ctx, t, c, ns, name)
		return len(byManager["kubectl-edit"]) > 0 && ctrl.Metric(series) == 2, nil
	}); err != nil {
		t.Fatalf("the sentinel's episode was never reported (events %v, %s = %v): %v", byManager, series, ctrl.Metric(series), err)
	}
	if evs := byManager["kube-controller-manager"]; len(evs) != 1 || evs[0].Count > 1 {
		t.Errorf("%d Events for kube-controller-manager's episode of %d writes, want one: %v", len(evs), foreignWrites, evs)
	} else {
		t.Logf("Event: %s", evs[0].Message)
	}
	if got := ctrl.Metric(series); got != 2 {
		t.Errorf("%s = %v, want 2 (one episode each for kube-controller-manager and kubectl-edit)", series, got)
	}
	writes, err := env.Writes(testenv.ByUserAgentPrefix(controller.UserAgentPrefix(), resource), testenv.ReceivedAfter(start),
		func(ev testenv.AuditEvent) bool { return ev.ObjectRef.Namespace == ns && ev.ObjectRef.Name == name })
	if err != nil {
		t.Fatal(err)
	}
	if bound := foreignWrites + 1 + 5; len(writes) > bound {
		t.Errorf("%d writes by the controller on %s %s against %d by others: it fights (bound %d): %s", len(writes), resource, name, foreignWrites+1, bound, describeWrites(writes))
	}
	t.Logf("controller writes on %s %s during the episode: %d (others: %d)", resource, name, len(writes), foreignWrites+1)
}

// foreignEvents returns the ForeignWriterDetected Events on the object named name, by the
// manager their message names.
func foreignEvents(ctx context.Context, t *testing.T, c kubernetes.Interface, ns, name string) map[string][]corev1.Event {
	t.Helper()
	list, err := c.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=" + foreign.Reason})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]corev1.Event{}
	for _, ev := range list.Items {
		if ev.InvolvedObject.Name != name {
			continue
		}
		manager, _, _ := strings.Cut(strings.TrimPrefix(ev.Message, `Field manager "`), `"`)
		out[manager] = append(out[manager], ev)
	}
	return out
}

func TestForeignWriterOnEndpoints(t *testing.T) {
	testenv.Require(t, env)
	c := env.Client(t)
	ns := env.Namespace(t)
	ctrl := env.StartLeading(t, controller, "ctrl", "--controllers", endpoints.Name)
	sel := map[string]string{"app": "web"}
	createService(t, c, makeService(ns, "web", sel))
	createPod(t, c, makePod(ns, "p1", "10.1.0.1", sel))
	waitEndpoints(t, c, ns, "web", "one ready address", func(ep *corev1.Endpoints) bool { return ep != nil && equal(testobj.ReadyIPs(ep), "10.1.0.1") })
	assertOneEpisode(t, ctrl, c, ns, endpoints.Name, "endpoints", "web", func(ctx context.Context, c kubernetes.Interface, i int) error {
		ep, err := c.CoreV1().Endpoints(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		ep.Subsets = []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{{IP: fmt.Sprintf("198.51.100.%d", i+1)}},
			Ports: []corev1.EndpointPort{{Name: "http", Port: 8080, Protocol: corev1.ProtocolTCP}}}}
		_, err = c.CoreV1().Endpoints(ns).Update(ctx, ep, metav1.UpdateOptions{})
		return err
	})
}

// rewriteSlice rewrites the addresses of the one slice of Service svc managed by managedBy.
func rewriteSlice(ns, svc, managedBy string) rewriteFunc {
	return func(ctx context.Context, c kubernetes.Interface, i int) error {
		list, err := c.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{
			LabelSelector: discovery.LabelServiceName + "=" + svc + "," + discovery.LabelManagedBy + "=" + managedBy})
		if err != nil {
			return err
		}
		if len(list.Items) != 1 {
			return fmt.Errorf("%d slices of %s", len(list.Items), svc)
		}
		s := list.Items[0]
		s.Endpoints = []discovery.Endpoint{{Addresses: []string{fmt.Sprintf("198.51.100.%d", i+1)}}}
		_, err = c.DiscoveryV1().EndpointSlices(ns).Update(ctx, &s, metav1.UpdateOptions{})
		return err
	}
}

// sliceName is the name of the one slice of Service svc managed by managedBy.
func sliceName(t *testing.T, c kubernetes.Interface, ns, svc, managedBy string) string {
	t.Helper()
	list, err := c.DiscoveryV1().EndpointSlices(ns).List(context.Background(), metav1.ListOptions{
		LabelSelector: discovery.LabelServiceName + "=" + svc + "," + discovery.LabelManagedBy + "=" + managedBy})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("slices of %s: %v (%v)", svc, list, err)
	}
	return list.Items[0].Name
}

func TestForeignWriterOnEndpointSlices(t *testing.T) {
	testenv.Require(t, env)
	c := env.Client(t)
	ns := env.Namespace(t)
	ctrl := env.StartLeading(t, controller, "ctrl", "--controllers", endpointslice.Name)
	sel := map[string]string{"app": "web"}
	createService(t, c, makeService(ns, "web", sel))
	createPod(t, c, makePod(ns, "p1", "10.1.0.1", sel))
	waitSlices(t, c, ns, "web", "one ready endpoint", func(ss []discovery.EndpointSlice) bool {
		return len(ss) == 1 && countReady(ss[0]) == 1
	})
	name := sliceName(t, c, ns, "web", endpointslice.ManagedBy)
	assertOneEpisode(t, ctrl, c, ns, endpointslice.Name, "endpointslices", name, rewriteSlice(ns, "web", endpointslice.ManagedBy))
}

func TestForeignWriterOnMirroredSlices(t *testing.T) {
	testenv.Require(t, env)
	c := env.Client(t)
	ns := env.Namespace(t)
	ctrl := env.StartLeading(t, controller, "ctrl", "--controllers", mirroring.Name)
	createService(t, c, makeService(ns, "ext", nil))
	createEndpoints(t, c, customEndpoints(ns, "ext", []string{"192.0.2.1"}, nil, nil))
	waitMirrored(t, c, ns, "ext", "one ready endpoint", func(ss []discovery.EndpointSlice) bool {
		return len(ss) == 1 && countReady(ss[0]) == 1
	})
	name := sliceName(t, c, ns, "ext", mirroring.ManagedBy)
	assertOneEpisode(t, ctrl, c, ns, mirroring.Name, "endpointslices", name, rewriteSlice(ns, "ext", mirroring.ManagedBy))
}
