package nodelifecycle_test

// Integration tests: the nodelifecycle-controller binary, built as it ships, against a real
// etcd + kube-apiserver v1.36.3 (shared/testenv). The test plays the kubelets: it creates
// Nodes, renews their Leases and posts their status. Node grace periods are a few seconds,
// set by flag. Nodes are cluster-scoped, so every test removes its own; tests run one after
// another, each with its own controller processes.

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/kcm-split/kcm-split/services/nodelifecycle"
	"github.com/kcm-split/kcm-split/shared/testenv"
)

var env *testenv.Env

// TestMain starts the control plane with DefaultTolerationSeconds off, so that a Pod
// created without tolerations really has none (the plugin would give every Pod 300 s for
// not-ready and unreachable).
func TestMain(m *testing.M) {
	testenv.MainWithOptions(m, &env, testenv.Options{ExtraAPIServerArgs: []string{"--disable-admission-plugins=DefaultTolerationSeconds"}})
}

// controller is the shipped binary, built once per test binary.
var controller = testenv.Binary{ID: nodelifecycle.ControllerID}

const (
	// Short timings for tests: Nodes renew every renewEvery; the controller's grace is 4 s.
	monitorPeriod = time.Second
	grace         = 4 * time.Second
	startupGrace  = 12 * time.Second
	renewEvery    = 500 * time.Millisecond
	// slack absorbs a slow, shared machine on top of what the controller may take.
	slack = 30 * time.Second
)

var shortTimings = []string{
	"--node-monitor-period=" + monitorPeriod.String(),
	"--node-monitor-grace-period=" + grace.String(),
	"--node-startup-grace-period=" + startupGrace.String(),
}

// ---- the fake kubelets ----

// kubelets plays the kubelet of a set of Nodes: it renews all their Leases together every
// renewEvery until told to stop for one of them, as kubelets do independently.
type kubelets struct {
	t       *testing.T
	client  kubernetes.Interface
	mu      sync.Mutex
	alive   map[string]bool
	stopped map[string]time.Time // last renewal of a Node told to stop
	cancel  context.CancelFunc
	done    chan struct{}
}

func newKubelets(t *testing.T) *kubelets {
	ctx, cancel := context.WithCancel(context.Background())
	k := &kubelets{t: t, client: env.Client(t), alive: map[string]bool{}, stopped: map[string]time.Time{}, cancel: cancel, done: make(chan struct{})}
	go k.loop(ctx)
	t.Cleanup(func() {
		k.cancel()
		<-k.done
		for name := range k.all() {
			_ = k.client.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
			_ = k.client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(context.Background(), name, metav1.DeleteOptions{})
		}
	})
	return k
}

func (k *kubelets) all() map[string]bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := map[string]bool{}
	for n := range k.alive {
		out[n] = true
	}
	for n := range k.stopped {
		out[n] = true
	}
	return out
}

func (k *kubelets) loop(ctx context.Context) {
	defer close(k.done)
	tick := time.NewTicker(renewEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		k.mu.Lock()
		names := make([]string, 0, len(k.alive))
		for n, ok := range k.alive {
			if ok {
				names = append(names, n)
			}
		}
		k.mu.Unlock()
		for _, n := range names {
			k.renew(ctx, n)
		}
	}
}

func (k *kubelets) renew(ctx context.Context, name string) {
	leases := k.client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	l, err := leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		holder, dur := name, int32(40)
		_, _ = leases.Create(ctx, &coordv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       coordv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &dur, RenewTime: &now},
		}, metav1.CreateOptions{})
		return
	}
	if err != nil {
		return
	}
	l.Spec.RenewTime = &now
	_, _ = leases.Update(ctx, l, metav1.UpdateOptions{})
}

// addNode creates a Ready Node in zone (region "r") and starts renewing its Lease.
func (k *kubelets) addNode(name, zone string) {
	k.t.Helper()
	now := metav1.Now()
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			corev1.LabelTopologyRegion: "r", corev1.LabelTopologyZone: zone, corev1.LabelHostname: name,
		}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now},
			{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, LastHeartbeatTime: now, LastTransitionTime: now},
			{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, LastHeartbeatTime: now, LastTransitionTime: now},
			{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, LastHeartbeatTime: now, LastTransitionTime: now},
		}},
	}
	k.create(node)
	k.renew(context.Background(), name)
	k.mu.Lock()
	k.alive[name] = true
	k.mu.Unlock()
}

func (k *kubelets) create(node *corev1.Node) *corev1.Node {
	k.t.Helper()
	created, err := k.client.CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{})
	if err != nil {
		k.t.Fatalf("creating node %s: %v", node.Name, err)
	}
	k.mu.Lock()
	if _, ok := k.alive[node.Name]; !ok {
		k.stopped[node.Name] = time.Time{}
	}
	k.mu.Unlock()
	return created
}

// stop ends the Lease renewals of the Nodes, as a kubelet that died or lost the network.
func (k *kubelets) stop(names ...string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, n := range names {
		delete(k.alive, n)
		k.stopped[n] = time.Now()
	}
}

// resume restarts the renewals and posts Ready=True, as a kubelet that is back does.
func (k *kubelets) resume(name string) {
	k.t.Helper()
	ctx := context.Background()
	err := retryConflict(func() error {
		n, err := k.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		for i := range n.Status.Conditions {
			c := &n.Status.Conditions[i]
			c.LastHeartbeatTime = now
			want := corev1.ConditionFalse
			if c.Type == corev1.NodeReady {
				want = corev1.ConditionTrue
			}
			if c.Status != want {
				c.Status, c.LastTransitionTime, c.Reason, c.Message = want, now, "KubeletReady", ""
			}
		}
		_, err = k.client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{FieldManager: nodelifecycle.KubeletManager})
		return err
	})
	if err != nil {
		k.t.Fatalf("posting node %s status: %v", name, err)
	}
	k.renew(ctx, name)
	k.mu.Lock()
	k.alive[name] = true
	delete(k.stopped, name)
	k.mu.Unlock()
}

func retryConflict(fn func() error) error {
	var err error
	for range 10 {
		if err = fn(); !apierrors.IsConflict(err) {
			return err
		}
	}
	return err
}

// ---- helpers ----

func getNode(t *testing.T, c kubernetes.Interface, name string) *corev1.Node {
	t.Helper()
	n, err := c.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("getting node %s: %v", name, err)
	}
	return n
}

func readyOf(n *corev1.Node) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

func hasTaint(n *corev1.Node, key string, effect corev1.TaintEffect) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == key && t.Effect == effect {
			return true
		}
	}
	return false
}

func hasNoExecute(n *corev1.Node) bool {
	return hasTaint(n, corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute) || hasTaint(n, corev1.TaintNodeNotReady, corev1.TaintEffectNoExecute)
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("timed out after %s waiting for %s", timeout, what)
	}
}

// waitNodes waits until every named Node satisfies cond.
func waitNodes(t *testing.T, c kubernetes.Interface, timeout time.Duration, what string, cond func(*corev1.Node) bool, names ...string) {
	t.Helper()
	waitFor(t, timeout, what, func() bool {
		for _, name := range names {
			n, err := c.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
			if err != nil || !cond(n) {
				return false
			}
		}
		return true
	})
}

// isReady reports whether the Node's Ready condition is True (taints aside).
func isReady(n *corev1.Node) bool {
	r := readyOf(n)
	return r != nil && r.Status == corev1.ConditionTrue
}

func isReadyClean(n *corev1.Node) bool {
	return isReady(n) && len(n.Spec.Taints) == 0
}

func isUnreachable(n *corev1.Node) bool {
	r := readyOf(n)
	return r != nil && r.Status == corev1.ConditionUnknown && r.Reason == "NodeStatusUnknown" &&
		hasTaint(n, corev1.TaintNodeUnreachable, corev1.TaintEffectNoSchedule)
}

func makePod(ns, name, node string, tolerations ...corev1.Toleration) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			NodeName:    node,
			Tolerations: tolerations,
			Containers:  []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
}

// createPod creates a Running, Ready Pod, as a kubelet would report it.
func createPod(t *testing.T, c kubernetes.Interface, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	created, err := c.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod %s: %v", p.Name, err)
	}
	created.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
		{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()},
	}}
	updated, err := c.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("pod %s status: %v", p.Name, err)
	}
	return updated
}

func unreachableToleration(seconds *int64) corev1.Toleration {
	return corev1.Toleration{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: seconds}
}

func ptr[T any](v T) *T { return &v }

func getPod(c kubernetes.Interface, ns, name string) (*corev1.Pod, error) {
	return c.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
}

// evicted reports whether the Pod is gone or being deleted.
func evicted(c kubernetes.Interface, ns, name string) bool {
	p, err := getPod(c, ns, name)
	return apierrors.IsNotFound(err) || (err == nil && p.DeletionTimestamp != nil)
}

func podReady(p *corev1.Pod) corev1.ConditionStatus {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status
		}
	}
	return ""
}

// podDeletes counts the controller's delete requests for the Pod.
func podDeletes(t *testing.T, ns, name string) int {
	t.Helper()
	evs, err := env.Writes(testenv.ByUserAgentPrefix(controller.UserAgentPrefix(), "pods"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ev := range evs {
		if ev.Verb == "delete" && ev.ObjectRef.Namespace == ns && ev.ObjectRef.Name == name && ev.ObjectRef.Subresource == "" {
			n++
		}
	}
	return n
}

// events returns "reason: message" of the Events about the object named name in ns.
func events(t *testing.T, c kubernetes.Interface, ns, name string) []string {
	t.Helper()
	list, err := c.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		for range max(e.Count, 1) {
			out = append(out, e.Reason+": "+e.Message)
		}
	}
	return out
}

func countPrefix(list []string, prefix string) int {
	n := 0
	for _, s := range list {
		if strings.HasPrefix(s, prefix) {
			n++
		}
	}
	return n
}

// clearZoneEvents deletes the zone Events earlier tests left (they are recorded on the
// cluster-scoped kube-node-lease Namespace, so they land in "default").
func clearZoneEvents(t *testing.T, c kubernetes.Interface) {
	t.Helper()
	err := c.CoreV1().Events("default").DeleteCollection(context.Background(), metav1.DeleteOptions{},
		metav1.ListOptions{FieldSelector: "involvedObject.name=" + corev1.NamespaceNodeLease})
	if err != nil {
		t.Fatal(err)
	}
}
