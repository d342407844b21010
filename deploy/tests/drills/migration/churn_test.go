package migration

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// Churn: one loop per controller, each making one change at a time and timing how long its
// effect takes to appear (polled every pollEvery). A change is made pause after the previous
// one's effect appeared, so a window in which no owner acts shows up, to within pause, as the
// latency of the change made at its start. Waits are bounded by effectTimeout: a change whose
// effect never appears is lost work.
const (
	pollEvery     = 100 * time.Millisecond
	pause         = 500 * time.Millisecond
	effectTimeout = 3 * time.Minute
	// nodeGrace is --node-monitor-grace-period on both sides: a Node whose Lease is not renewed
	// for that long is the node lifecycle controller's to mark NotReady.
	nodeGrace = 8 * time.Second
)

// sample is one change and its effect.
type sample struct {
	what string
	// at is when the change was made (for a silent Node: when its grace period ran out).
	at time.Time
	// seen is when its effect was first observed; zero when it never was (lost).
	seen time.Time
}

// churner drives one controller.
type churner struct {
	name string
	// step makes change i and returns when it counts from and what shows its effect.
	step func(ctx context.Context, i int) (at time.Time, what string, effect func(context.Context) (bool, error), err error)
	// after runs once change i's effect is in place (cleanup that keeps the objects few).
	after func(ctx context.Context, i int)
	// final reports whether the controller's end state holds every change's effect.
	final func(ctx context.Context) (bool, string, error)

	mu      sync.Mutex // held for a whole step: pause waits for the one in flight
	paused  atomic.Bool
	smu     sync.Mutex // guards samples (mu is held for seconds)
	samples []sample
	errors  atomic.Int64
	done    chan struct{}
}

// run loops until ctx ends; the step in flight then completes (its effect awaited, bounded).
func (c *churner) run(ctx context.Context, t *testing.T) {
	c.done = make(chan struct{})
	go func() {
		defer close(c.done)
		for i := 0; ctx.Err() == nil; i++ {
			if c.paused.Load() {
				i--
				sleep(ctx, pollEvery)
				continue
			}
			c.mu.Lock()
			if c.paused.Load() { // paused while this loop waited for mu
				c.mu.Unlock()
				i--
				continue
			}
			c.once(t, i)
			c.mu.Unlock()
			sleep(ctx, pause)
		}
	}()
}

func (c *churner) once(t *testing.T, i int) {
	ctx, cancel := context.WithTimeout(context.Background(), effectTimeout+30*time.Second)
	defer cancel()
	at, what, effect, err := c.step(ctx, i)
	if err != nil {
		c.errors.Add(1)
		t.Logf("churn %s step %d: %v", c.name, i, err)
		return
	}
	s := sample{what: what, at: at}
	err = wait.PollUntilContextTimeout(ctx, pollEvery, effectTimeout, true, func(ctx context.Context) (bool, error) {
		ok, err := effect(ctx)
		if err != nil {
			t.Logf("churn %s step %d: checking the effect: %v", c.name, i, err)
		}
		return ok, nil
	})
	if err == nil {
		s.seen = time.Now()
		if c.after != nil {
			c.after(ctx, i)
		}
	} else {
		t.Logf("churn %s: LOST %s (made %s, no effect within %s)", c.name, what, at.Format(time.StampMilli), effectTimeout)
	}
	c.record(s)
}

func (c *churner) record(s sample) {
	c.smu.Lock()
	defer c.smu.Unlock()
	c.samples = append(c.samples, s)
}

func (c *churner) snapshot() []sample {
	c.smu.Lock()
	defer c.smu.Unlock()
	return slices.Clone(c.samples)
}

// pause stops the loop after the step in flight (whose effect it awaits).
func (c *churner) pause() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.paused.Store(true)
}

func (c *churner) resume() { c.paused.Store(false) }

// caughtUp reports whether a change made after since has had its effect (or c is paused).
func (c *churner) caughtUp(since time.Time) bool {
	if c.paused.Load() {
		return true
	}
	for _, s := range c.snapshot() {
		if s.at.After(since) && !s.seen.IsZero() {
			return true
		}
	}
	return false
}

// window is a phase of the drill.
type window struct {
	name       string
	start, end time.Time
}

// gapIn is the longest latency among c's changes pending at any time during w (a change made
// before w whose effect came during it counts too), and how many changes that covers.
func (c *churner) gapIn(w window) (time.Duration, int) {
	var worst time.Duration
	n := 0
	for _, s := range c.snapshot() {
		end := s.seen
		if end.IsZero() {
			end = time.Now()
		}
		if end.Before(w.start) || s.at.After(w.end) {
			continue
		}
		n++
		worst = max(worst, end.Sub(s.at))
	}
	return worst, n
}

// slowIn returns c's changes pending during w that waited longer than d.
func (c *churner) slowIn(w window, d time.Duration) []sample {
	var out []sample
	for _, s := range c.snapshot() {
		end := s.seen
		if end.IsZero() {
			end = time.Now()
		}
		if end.Before(w.start) || s.at.After(w.end) || end.Sub(s.at) <= d {
			continue
		}
		out = append(out, s)
	}
	return out
}

// lost is the number of c's changes whose effect never appeared.
func (c *churner) lost() int {
	n := 0
	for _, s := range c.snapshot() {
		if s.seen.IsZero() {
			n++
		}
	}
	return n
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// Namespaces of the churn, one per controller that needs one.
const (
	nsEndpoints = "mig-endpoints"
	nsQuota     = "mig-quota"
	nsPV        = "mig-pv"
	nsLB        = "mig-lb"
)

// --- endpoints: a Pod's readiness flips; Endpoints and the EndpointSlice follow.

const webIP = "198.18.0.10"

func endpointsChurner(c kubernetes.Interface) *churner {
	return &churner{
		name: "endpoints",
		step: func(ctx context.Context, i int) (time.Time, string, func(context.Context) (bool, error), error) {
			ready := i%2 == 1 // the Pod starts Ready: change 0 makes it not ready
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				pod, err := c.CoreV1().Pods(nsEndpoints).Get(ctx, "web", metav1.GetOptions{})
				if err != nil {
					return err
				}
				pod.Status.Conditions = readyConditions(ready)
				_, err = c.CoreV1().Pods(nsEndpoints).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
				return err
			})
			at := time.Now()
			return at, fmt.Sprintf("Pod web ready=%v", ready), func(ctx context.Context) (bool, error) {
				return endpointsShow(ctx, c, ready)
			}, err
		},
		final: func(ctx context.Context) (bool, string, error) {
			pod, err := c.CoreV1().Pods(nsEndpoints).Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return false, "", err
			}
			ready := podReady(pod)
			ok, err := endpointsShow(ctx, c, ready)
			return ok, fmt.Sprintf("Endpoints and EndpointSlice show Pod web ready=%v", ready), err
		},
	}
}

// endpointsShow reports whether both Endpoints web and its EndpointSlice show the Pod with
// the given readiness.
func endpointsShow(ctx context.Context, c kubernetes.Interface, ready bool) (bool, error) {
	ep, err := c.CoreV1().Endpoints(nsEndpoints).Get(ctx, "web", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	in := func(addrs []corev1.EndpointAddress) bool {
		return slices.ContainsFunc(addrs, func(a corev1.EndpointAddress) bool { return a.IP == webIP })
	}
	okEP := false
	for _, s := range ep.Subsets {
		if (ready && in(s.Addresses) && !in(s.NotReadyAddresses)) || (!ready && in(s.NotReadyAddresses) && !in(s.Addresses)) {
			okEP = true
		}
	}
	if !okEP {
		return false, nil
	}
	eps, err := c.DiscoveryV1().EndpointSlices(nsEndpoints).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=web"})
	if err != nil {
		return false, err
	}
	for _, s := range eps.Items {
		for _, e := range s.Endpoints {
			if slices.Contains(e.Addresses, webIP) && e.Conditions.Ready != nil && *e.Conditions.Ready == ready {
				return true, nil
			}
		}
	}
	return false, nil
}

func readyConditions(ready bool) []corev1.PodCondition {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	now := metav1.Now()
	return []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
		{Type: corev1.PodReady, Status: st, LastTransitionTime: now},
		{Type: corev1.ContainersReady, Status: st, LastTransitionTime: now},
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// --- quota: a Pod counted by a ResourceQuota is created (admission charges it) and deleted
// (only the controller gives it back).

func quotaChurner(c kubernetes.Interface) *churner {
	usedIs := func(ctx context.Context, want int64) (bool, error) {
		q, err := c.CoreV1().ResourceQuotas(nsQuota).Get(ctx, "q", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		used, ok := q.Status.Used[corev1.ResourcePods]
		return ok && used.Value() == want, nil
	}
	return &churner{
		name: "quota",
		step: func(ctx context.Context, i int) (time.Time, string, func(context.Context) (bool, error), error) {
			name := fmt.Sprintf("q-%d", i)
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: nsQuota},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "q"}}}}
			if _, err := c.CoreV1().Pods(nsQuota).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				return time.Time{}, "", nil, err
			}
			// Unscheduled: deleted at once, no kubelet involved.
			err := c.CoreV1().Pods(nsQuota).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
			at := time.Now()
			return at, "Pod " + name + " deleted -> quota used pods=1", func(ctx context.Context) (bool, error) { return usedIs(ctx, 1) }, err
		},
		final: func(ctx context.Context) (bool, string, error) {
			ok, err := usedIs(ctx, 1)
			return ok, "ResourceQuota q used pods=1 (the one long-lived Pod)", err
		},
	}
}

// --- namespace: a namespace with content is deleted; it must go.

func namespaceChurner(c kubernetes.Interface) *churner {
	gone := func(ctx context.Context, name string) (bool, error) {
		_, err := c.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	}
	var last atomic.Int64
	last.Store(-1)
	return &churner{
		name: "namespace",
		step: func(ctx context.Context, i int) (time.Time, string, func(context.Context) (bool, error), error) {
			name := fmt.Sprintf("mig-ns-%d", i)
			last.Store(int64(i))
			if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
				return time.Time{}, "", nil, err
			}
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: name}}
			if _, err := c.CoreV1().ConfigMaps(name).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
				return time.Time{}, "", nil, err
			}
			err := c.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
			at := time.Now()
			return at, "namespace " + name + " deleted", func(ctx context.Context) (bool, error) { return gone(ctx, name) }, err
		},
		final: func(ctx context.Context) (bool, string, error) {
			list, err := c.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, "", err
			}
			for _, ns := range list.Items {
				if len(ns.Name) > 7 && ns.Name[:7] == "mig-ns-" {
					return false, "namespace " + ns.Name + " still there", nil
				}
			}
			return true, "every churn namespace gone", nil
		},
	}
}

// --- pvbinder: a claim against a matching static volume must bind; both are deleted after.

const pvClass = "mig-static"

func pvChurner(c kubernetes.Interface) *churner {
	bound := func(ctx context.Context, name string) (bool, error) {
		pvc, err := c.CoreV1().PersistentVolumeClaims(nsPV).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return pvc.Status.Phase == corev1.ClaimBound && pvc.Spec.VolumeName != "", nil
	}
	var live atomic.Int64 // the last claim left in place at the end
	live.Store(-1)
	return &churner{
		name: "pvbinder",
		step: func(ctx context.Context, i int) (time.Time, string, func(context.Context) (bool, error), error) {
			name := fmt.Sprintf("mig-%d", i)
			class := pvClass
			pv := &corev1.PersistentVolume{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: corev1.PersistentVolumeSpec{
					Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
					AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
					StorageClassName:              class,
					PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp/" + name}},
				},
			}
			if _, err := c.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
				return time.Time{}, "", nil, err
			}
			// A claim synced before the binder's cache holds its volume waits for the binder's
			// periodic resync (15 s): that is the binder's own latency, not a gap in ownership.
			sleep(ctx, time.Second)
			pvc := &corev1.PersistentVolumeClaim{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: nsPV},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					StorageClassName: &class,
					Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
				},
			}
			_, err := c.CoreV1().PersistentVolumeClaims(nsPV).Create(ctx, pvc, metav1.CreateOptions{})
			at := time.Now()
			return at, "claim " + name + " created", func(ctx context.Context) (bool, error) { return bound(ctx, name) }, err
		},
		// The previous claim and volume go once this one is bound: a handful of objects live.
		after: func(ctx context.Context, i int) {
			if prev := live.Swap(int64(i)); prev >= 0 {
				name := fmt.Sprintf("mig-%d", prev)
				_ = c.CoreV1().PersistentVolumeClaims(nsPV).Delete(ctx, name, metav1.DeleteOptions{})
				_ = c.CoreV1().PersistentVolumes().Delete(ctx, name, metav1.DeleteOptions{})
			}
		},
		final: func(ctx context.Context) (bool, string, error) {
			list, err := c.CoreV1().PersistentVolumeClaims(nsPV).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, "", err
			}
			for _, pvc := range list.Items {
				if pvc.DeletionTimestamp == nil && pvc.Status.Phase != corev1.ClaimBound {
					return false, "claim " + pvc.Name + " not bound", nil
				}
			}
			return true, "every live claim bound", nil
		},
	}
}

// --- servicelb: a LoadBalancer Service gets an address from the pool.

var poolGVR = schema.GroupVersionResource{Group: "lb.kcm-split.io", Version: "v1alpha1", Resource: "ipaddresspools"}

func serviceLBChurner(c kubernetes.Interface) *churner {
	has := func(ctx context.Context, name string) (bool, error) {
		svc, err := c.CoreV1().Services(nsLB).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return len(svc.Status.LoadBalancer.Ingress) > 0, nil
	}
	return &churner{
		name: "servicelb",
		step: func(ctx context.Context, i int) (time.Time, string, func(context.Context) (bool, error), error) {
			name := fmt.Sprintf("lb-%d", i)
			svc := &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: nsLB},
				Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
					Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
			}
			_, err := c.CoreV1().Services(nsLB).Create(ctx, svc, metav1.CreateOptions{})
			at := time.Now()
			return at, "Service " + name + " created", func(ctx context.Context) (bool, error) { return has(ctx, name) }, err
		},
		// At most 3 live: deleted only while the controller runs (this step's effect just
		// appeared), which removes its finalizer.
		after: func(ctx context.Context, i int) {
			if i >= 3 {
				_ = c.CoreV1().Services(nsLB).Delete(ctx, fmt.Sprintf("lb-%d", i-3), metav1.DeleteOptions{})
			}
		},
		final: func(ctx context.Context) (bool, string, error) {
			list, err := c.CoreV1().Services(nsLB).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, "", err
			}
			for _, s := range list.Items {
				if s.DeletionTimestamp == nil && len(s.Status.LoadBalancer.Ingress) == 0 {
					return false, "Service " + s.Name + " has no address", nil
				}
			}
			return true, "every live LoadBalancer Service has an address", nil
		},
	}
}

// --- nodelifecycle: a Node whose Lease stops being renewed turns NotReady and tainted; renewed
// and Ready again, its taint goes.

const unreachableTaint = "node.kubernetes.io/unreachable"

// fakeNodes plays the kubelets: it renews every Node's Lease each second, except a silent one's.
type fakeNodes struct {
	c      kubernetes.Interface
	mu     sync.Mutex
	silent map[string]bool
	// renewed is when each Lease's last renewal was answered.
	renewed map[string]time.Time
	// extra are Nodes beside nodeNames: the control-plane node the mirror Pods of KCM are on.
	extra []string
}

func (f *fakeNodes) names() []string { return append(append([]string{}, nodeNames...), f.extra...) }

var nodeNames = []string{"mig-node-0", "mig-node-1", "mig-node-flap"}

func (f *fakeNodes) setup(ctx context.Context) error {
	for _, name := range f.names() {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if _, err := f.c.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			return err
		}
		if err := f.markReady(ctx, name); err != nil {
			return err
		}
		hold, dur := name, int32(nodeGrace/time.Second)
		lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-node-lease"},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &hold, LeaseDurationSeconds: &dur, RenewTime: &metav1.MicroTime{Time: time.Now()}}}
		if _, err := f.c.CoordinationV1().Leases("kube-node-lease").Create(ctx, lease, metav1.CreateOptions{}); err != nil {
			return err
		}
		f.renewed[name] = time.Now()
	}
	return nil
}

func (f *fakeNodes) markReady(ctx context.Context, name string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := f.c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
			Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now}}
		_, err = f.c.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
		return err
	})
}

// renew runs until ctx ends. Each renewal holds mu from the silence check to its answer, so
// that a Node silenced meanwhile is not renewed behind the churn's back and renewed is the
// last renewal the controller can have seen.
func (f *fakeNodes) renew(ctx context.Context) {
	for ctx.Err() == nil {
		for _, name := range f.names() {
			f.renewOne(ctx, name)
		}
		sleep(ctx, time.Second)
	}
}

func (f *fakeNodes) renewOne(ctx context.Context, name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.silent[name] {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	lease, err := f.c.CoordinationV1().Leases("kube-node-lease").Get(rctx, name, metav1.GetOptions{})
	if err != nil {
		return
	}
	lease.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
	if _, err := f.c.CoordinationV1().Leases("kube-node-lease").Update(rctx, lease, metav1.UpdateOptions{}); err == nil {
		f.renewed[name] = time.Now()
	}
}

func nodeChurner(f *fakeNodes) *churner {
	const flap = "mig-node-flap"
	state := func(ctx context.Context) (ready corev1.ConditionStatus, tainted bool, err error) {
		node, err := f.c.CoreV1().Nodes().Get(ctx, flap, metav1.GetOptions{})
		if err != nil {
			return "", false, err
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				ready = c.Status
			}
		}
		tainted = slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == unreachableTaint })
		return ready, tainted, nil
	}
	return &churner{
		name: "nodelifecycle",
		step: func(ctx context.Context, i int) (time.Time, string, func(context.Context) (bool, error), error) {
			if i%2 == 0 {
				// Silence: the change "happens" when the grace period after the last renewal runs
				// out. The Node is first left healthy for a few renewals.
				sleep(ctx, 3*time.Second)
				f.mu.Lock()
				f.silent[flap] = true
				at := f.renewed[flap].Add(nodeGrace)
				f.mu.Unlock()
				return at, "Node " + flap + " silent", func(ctx context.Context) (bool, error) {
					ready, tainted, err := state(ctx)
					return ready == corev1.ConditionUnknown && tainted, err
				}, nil
			}
			// Back: the kubelet posts Ready and renews again.
			err := f.markReady(ctx, flap)
			at := time.Now()
			f.mu.Lock()
			f.silent[flap] = false
			f.renewed[flap] = at // the status heartbeat is a renewal too
			f.mu.Unlock()
			return at, "Node " + flap + " Ready again", func(ctx context.Context) (bool, error) {
				ready, tainted, err := state(ctx)
				return ready == corev1.ConditionTrue && !tainted, err
			}, err
		},
		// The Node is back and Ready in the end (the churn's last step is awaited either way):
		// its state must match what its kubelet says.
		final: func(ctx context.Context) (bool, string, error) {
			f.mu.Lock()
			silent := f.silent[flap]
			f.mu.Unlock()
			ready, tainted, err := state(ctx)
			if silent {
				return ready == corev1.ConditionUnknown && tainted, "silent Node NotReady and tainted", err
			}
			return ready == corev1.ConditionTrue && !tainted, "renewing Node Ready, not tainted", err
		},
	}
}

// setupChurn creates what the churn needs: namespaces, the Service and its Pod, the quota and
// its long-lived Pod, the address pool, the Nodes and their Leases.
func setupChurn(ctx context.Context, c kubernetes.Interface, dyn dynamic.Interface, nodes *fakeNodes) error {
	for _, ns := range []string{nsEndpoints, nsQuota, nsPV, nsLB} {
		if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	if err := nodes.setup(ctx); err != nil {
		return err
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: nsEndpoints},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
	if _, err := c.CoreV1().Services(nsEndpoints).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return err
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: nsEndpoints, Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{NodeName: nodeNames[0], Containers: []corev1.Container{{Name: "c", Image: "web"}}}}
	out, err := c.CoreV1().Pods(nsEndpoints).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	out.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: webIP, PodIPs: []corev1.PodIP{{IP: webIP}}, Conditions: readyConditions(true)}
	if _, err := c.CoreV1().Pods(nsEndpoints).UpdateStatus(ctx, out, metav1.UpdateOptions{}); err != nil {
		return err
	}
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "q", Namespace: nsQuota},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("20")}}}
	if _, err := c.CoreV1().ResourceQuotas(nsQuota).Create(ctx, q, metav1.CreateOptions{}); err != nil {
		return err
	}
	pool := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "lb.kcm-split.io/v1alpha1", "kind": "IPAddressPool",
		"metadata": map[string]any{"name": "mig-pool"},
		"spec":     map[string]any{"addresses": []any{"192.0.2.0/24"}, "namespaces": []any{nsLB}},
	}}
	if _, err := dyn.Resource(poolGVR).Create(ctx, pool, metav1.CreateOptions{}); err != nil {
		return err
	}
	return nil
}

// createLongLivedQuotaPod creates the Pod the quota counts throughout, once the quota's status
// exists (admission charges only a quota with status).
func createLongLivedQuotaPod(ctx context.Context, c kubernetes.Interface) error {
	err := wait.PollUntilContextTimeout(ctx, pollEvery, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		q, err := c.CoreV1().ResourceQuotas(nsQuota).Get(ctx, "q", metav1.GetOptions{})
		return err == nil && q.Status.Hard != nil, nil
	})
	if err != nil {
		return fmt.Errorf("the quota never got its status: %w", err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "long", Namespace: nsQuota},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "q"}}}}
	_, err = c.CoreV1().Pods(nsQuota).Create(ctx, pod, metav1.CreateOptions{})
	return err
}
