package drills

import (
	"context"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apisharding "k8s.io/apimachinery/pkg/sharding"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/kcm-split/kcm-split/shared/sharding"
)

// shardOf is the shard (of count, hash h) owning namespace, computed here from the
// apiserver's hash (k8s.io/apimachinery/pkg/sharding.HashField) rather than with the
// binaries' own range code, so that the drill checks the binaries instead of repeating them:
// the I-th of count equal ranges of the 64-bit space is the top 64 bits of hash*count. The
// mixed hash is the apiserver's followed by a finalizer no apiserver computes: its value comes
// from shared/sharding, once its FNV part is checked against the apiserver's.
func shardOf(namespace string, count int, h sharding.Hash) int {
	v, err := strconv.ParseUint(apisharding.HashField(namespace), 16, 64)
	if err != nil {
		panic(err) // 16 hex digits by HashField's contract
	}
	if h.Name() == sharding.HashMixed {
		if sharding.HashFNV.Sum(namespace) != v {
			panic("shared/sharding's FNV-1a of " + namespace + " is not the apiserver's")
		}
		v = sharding.HashMixed.Sum(namespace)
	}
	hi, _ := bits.Mul64(v, uint64(count))
	return int(hi)
}

// shardHashes is each binary's --shard-hash in the drill: endpoints-controller the KEP's
// (the apiserver filters for it when the gate is on), quota-controller the mixed one (it
// filters on the client side, gate or not), so one run drills both.
var shardHashes = map[string]sharding.Hash{"endpoints-controller": sharding.HashFNV, "quota-controller": sharding.HashMixed}

// drillNamespaces are the workload's namespaces: the first 28 of the names clusters use
// (sharding.RealisticNamespaces). They split 16/12 over 2 shards and 11/5/4/8 over 4 with
// the KEP's hash, 15/13 and 7/8/6/7 with the mixed one; the test checks each shard gets
// several.
func drillNamespaces(t *testing.T) []string {
	t.Helper()
	out := sharding.RealisticNamespaces(28)
	for _, h := range sharding.Hashes {
		for _, n := range []int{2, 4} {
			spread := make([]int, n)
			for _, ns := range out {
				k := shardOf(ns, n, h)
				if !(sharding.Shard{Index: k, Count: n, Hash: h}).Owns(ns) {
					t.Fatalf("the drill's hash and the binaries' disagree on %s (shard %d of %d, %s)", ns, k, n, h)
				}
				spread[k]++
			}
			t.Logf("namespaces per shard of %d (%s): %v", n, h, spread)
			if slices.Min(spread) < 4 {
				t.Fatalf("test is broken: a shard of %d (%s) gets fewer than 4 of the namespaces (%v)", n, h, spread)
			}
		}
	}
	return out
}

// The churn's bounds: per namespace at most maxPods Pods behind the Services and at most
// maxExtra Services besides the long-lived "web".
const (
	maxPods  = 6
	maxExtra = 2
)

// churn is the workload: readiness flips, Pods and Services created and deleted, in every
// namespace, one operation per period, by the test's admin client. Each namespace has a
// ResourceQuota counting its Pods and Services, and every Service selects all its Pods, so
// every operation makes the endpoints or the quota controller (most make both) write.
type churn struct {
	c   kubernetes.Interface
	t   *testing.T
	rng *rand.Rand

	mu    sync.Mutex
	pods  map[string]map[string]bool // namespace -> Pod -> ready
	extra map[string][]string        // namespace -> Services besides "web"
	next  int                        // names and IPs of new Pods and Services

	ops, errs atomic.Int64
	byKind    sync.Map // kind -> *atomic.Int64
	done      chan struct{}
}

var webSelector = map[string]string{"app": "web"}

func newChurn(t *testing.T, c kubernetes.Interface) *churn {
	return &churn{c: c, t: t, rng: rand.New(rand.NewPCG(35, 6)), pods: map[string]map[string]bool{}, extra: map[string][]string{}}
}

// setup creates each namespace with its quota, the "web" Service and three ready Pods.
func (ch *churn) setup(ctx context.Context, namespaces []string) error {
	for _, ns := range namespaces {
		if _, err := ch.c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return err
		}
		q := &corev1.ResourceQuota{
			ObjectMeta: metav1.ObjectMeta{Name: "q", Namespace: ns},
			Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("100"), corev1.ResourceServices: resource.MustParse("100")}},
		}
		if _, err := ch.c.CoreV1().ResourceQuotas(ns).Create(ctx, q, metav1.CreateOptions{}); err != nil {
			return err
		}
		ch.pods[ns] = map[string]bool{}
		if err := ch.createService(ctx, ns, "web"); err != nil {
			return err
		}
		for range 3 {
			if err := ch.createPod(ctx, ns); err != nil {
				return err
			}
		}
	}
	return nil
}

func (ch *churn) createService(ctx context.Context, ns, name string) error {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.ServiceSpec{Selector: webSelector,
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
	_, err := ch.c.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
	return err
}

// createPod creates a Pod bound to the drill's Node and reports it Running and ready (there
// is no kubelet: the test writes the status a kubelet would).
func (ch *churn) createPod(ctx context.Context, ns string) error {
	ch.mu.Lock()
	ch.next++
	k := ch.next
	ch.mu.Unlock()
	name := fmt.Sprintf("web-%d", k)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: webSelector},
		Spec:       corev1.PodSpec{NodeName: "drill-node", Containers: []corev1.Container{{Name: "c", Image: "web"}}},
	}
	out, err := ch.c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	ip := netip.AddrFrom4([4]byte{198, 18, byte(k / 250), byte(1 + k%250)}).String()
	out.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	ch.mu.Lock()
	ch.pods[ns][name] = false // exists; not ready until the status lands
	ch.mu.Unlock()
	if _, err := ch.c.CoreV1().Pods(ns).UpdateStatus(ctx, out, metav1.UpdateOptions{}); err != nil {
		return err
	}
	ch.mu.Lock()
	ch.pods[ns][name] = true
	ch.mu.Unlock()
	return nil
}

// flip turns a Pod's Ready condition over.
func (ch *churn) flip(ctx context.Context, ns, name string) error {
	pod, err := ch.c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	ready := false
	for i, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			ready = c.Status != corev1.ConditionTrue
			pod.Status.Conditions[i].Status = corev1.ConditionFalse
			if ready {
				pod.Status.Conditions[i].Status = corev1.ConditionTrue
			}
		}
	}
	if _, err := ch.c.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		return err
	}
	ch.mu.Lock()
	ch.pods[ns][name] = ready
	ch.mu.Unlock()
	return nil
}

// step makes one random operation in one random namespace and names it.
func (ch *churn) step(ctx context.Context, namespaces []string) (string, error) {
	ch.mu.Lock()
	ns := namespaces[ch.rng.IntN(len(namespaces))]
	pods := make([]string, 0, len(ch.pods[ns]))
	for p := range ch.pods[ns] {
		pods = append(pods, p)
	}
	slices.Sort(pods)
	extra := slices.Clone(ch.extra[ns])
	roll := ch.rng.IntN(100)
	pick := ch.rng.IntN(1 << 20)
	ch.mu.Unlock()

	podAdd := func() (string, error) { return "pod+", ch.createPod(ctx, ns) }
	podDel := func() (string, error) {
		name := pods[pick%len(pods)]
		err := ch.c.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		if err == nil || apierrors.IsNotFound(err) {
			ch.mu.Lock()
			delete(ch.pods[ns], name)
			ch.mu.Unlock()
		}
		return "pod-", err
	}
	svcAdd := func() (string, error) {
		ch.mu.Lock()
		ch.next++
		name := fmt.Sprintf("svc-%d", ch.next)
		ch.mu.Unlock()
		if err := ch.createService(ctx, ns, name); err != nil {
			return "svc+", err
		}
		ch.mu.Lock()
		ch.extra[ns] = append(ch.extra[ns], name)
		ch.mu.Unlock()
		return "svc+", nil
	}
	svcDel := func() (string, error) {
		name := extra[pick%len(extra)]
		err := ch.c.CoreV1().Services(ns).Delete(ctx, name, metav1.DeleteOptions{})
		if err == nil || apierrors.IsNotFound(err) {
			ch.mu.Lock()
			ch.extra[ns] = slices.DeleteFunc(ch.extra[ns], func(s string) bool { return s == name })
			ch.mu.Unlock()
		}
		return "svc-", err
	}
	switch {
	case len(pods) == 0:
		return podAdd()
	case roll < 40:
		return "flip", ch.flip(ctx, ns, pods[pick%len(pods)])
	case roll < 60 && len(pods) < maxPods, roll >= 60 && roll < 75 && len(pods) == 1:
		return podAdd()
	case roll < 75:
		return podDel()
	case roll < 87 && len(extra) < maxExtra, roll >= 87 && len(extra) == 0:
		return svcAdd()
	default:
		return svcDel()
	}
}

// run makes one operation per period until ctx ends; stop waits for the last one.
func (ch *churn) run(ctx context.Context, namespaces []string, period time.Duration) {
	ch.done = make(chan struct{})
	go func() {
		defer close(ch.done)
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			// An operation runs to its end even when the churn is stopped meanwhile.
			sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			kind, err := ch.step(sctx, namespaces)
			cancel()
			ch.ops.Add(1)
			n, _ := ch.byKind.LoadOrStore(kind, new(atomic.Int64))
			n.(*atomic.Int64).Add(1)
			if err != nil {
				ch.errs.Add(1)
				ch.t.Logf("churn %s: %v", kind, err)
			}
		}
	}()
}

// summary is "N ops (flip a, pod+ b, ...), E errors".
func (ch *churn) summary() string {
	var parts []string
	for _, k := range []string{"flip", "pod+", "pod-", "svc+", "svc-"} {
		if n, ok := ch.byKind.Load(k); ok {
			parts = append(parts, fmt.Sprintf("%s %d", k, n.(*atomic.Int64).Load()))
		}
	}
	return fmt.Sprintf("%d ops (%v), %d failed", ch.ops.Load(), parts, ch.errs.Load())
}

// converged reports whether, in every namespace, each Service's Endpoints and EndpointSlices
// say exactly what its Pods' readiness says, no Endpoints outlives its Service, and the
// quota's status.used counts the live Pods and Services; else why not. (EndpointSlices of a
// deleted Service go by garbage collection, their owner reference, upstream as here; no
// garbage collector runs in this control plane, so they stay.) Five lists a look, whatever
// the number of namespaces.
// Over 80 lines: five cluster-wide lists indexed once, then every namespace checked against those same indexes.
func converged(ctx context.Context, c kubernetes.Interface, namespaces []string) (string, error) {
	all := metav1.ListOptions{}
	pods, err := c.CoreV1().Pods("").List(ctx, all)
	if err != nil {
		return "", err
	}
	svcs, err := c.CoreV1().Services("").List(ctx, all)
	if err != nil {
		return "", err
	}
	eps, err := c.CoreV1().Endpoints("").List(ctx, all)
	if err != nil {
		return "", err
	}
	slices, err := c.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelManagedBy + "=endpointslice-controller.k8s.io"})
	if err != nil {
		return "", err
	}
	quotas, err := c.CoreV1().ResourceQuotas("").List(ctx, all)
	if err != nil {
		return "", err
	}
	want := map[string]map[string]bool{} // namespace -> IP -> ready
	podCount := map[string]int{}
	for _, p := range pods.Items {
		podCount[p.Namespace]++
		if p.Status.PodIP == "" || p.DeletionTimestamp != nil {
			continue
		}
		ready := false
		for _, c := range p.Status.Conditions {
			ready = ready || c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
		}
		if want[p.Namespace] == nil {
			want[p.Namespace] = map[string]bool{}
		}
		want[p.Namespace][p.Status.PodIP] = ready
	}
	live := map[string]bool{} // namespace/name
	svcCount := map[string]int{}
	for _, s := range svcs.Items {
		live[s.Namespace+"/"+s.Name] = true
		svcCount[s.Namespace]++
	}
	epOf := map[string]map[string]bool{}
	for _, ep := range eps.Items {
		key := ep.Namespace + "/" + ep.Name
		got := map[string]bool{}
		for _, sub := range ep.Subsets {
			for _, a := range sub.Addresses {
				got[a.IP] = true
			}
			for _, a := range sub.NotReadyAddresses {
				got[a.IP] = false
			}
		}
		epOf[key] = got
	}
	sliceOf := map[string]map[string]bool{}
	for _, sl := range slices.Items {
		key := sl.Namespace + "/" + sl.Labels[discoveryv1.LabelServiceName]
		if sliceOf[key] == nil {
			sliceOf[key] = map[string]bool{}
		}
		for _, e := range sl.Endpoints {
			for _, a := range e.Addresses {
				sliceOf[key][a] = e.Conditions.Ready != nil && *e.Conditions.Ready
			}
		}
	}
	used := map[string]corev1.ResourceList{}
	for _, q := range quotas.Items {
		if q.Name == "q" {
			used[q.Namespace] = q.Status.Used
		}
	}
	for _, ns := range namespaces {
		for _, s := range svcs.Items {
			if s.Namespace != ns {
				continue
			}
			key := ns + "/" + s.Name
			w := want[ns]
			if w == nil {
				w = map[string]bool{}
			}
			got, ok := epOf[key]
			if !ok {
				return fmt.Sprintf("Service %s has no Endpoints", key), nil
			}
			if !sameReadiness(got, w) {
				return fmt.Sprintf("Endpoints %s say %v, the Pods %v", key, got, w), nil
			}
			got, ok = sliceOf[key]
			if !ok {
				return fmt.Sprintf("Service %s has no EndpointSlice", key), nil
			}
			if !sameReadiness(got, w) {
				return fmt.Sprintf("EndpointSlices of %s say %v, the Pods %v", key, got, w), nil
			}
		}
		for _, ep := range eps.Items {
			if ep.Namespace == ns && !live[ns+"/"+ep.Name] {
				return fmt.Sprintf("Endpoints %s/%s outlive their Service", ns, ep.Name), nil
			}
		}
		u, ok := used[ns]
		if !ok {
			return fmt.Sprintf("no quota in %s", ns), nil
		}
		for r, n := range map[corev1.ResourceName]int{corev1.ResourcePods: podCount[ns], corev1.ResourceServices: svcCount[ns]} {
			if v, ok := u[r]; !ok || v.Value() != int64(n) {
				return fmt.Sprintf("quota %s/q: used %s is %s, %d live", ns, r, v.String(), n), nil
			}
		}
	}
	return "", nil
}

func sameReadiness(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
