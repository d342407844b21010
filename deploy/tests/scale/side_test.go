package scale

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"

	"github.com/kcm-split/kcm-split/shared/benchkit"
	"github.com/kcm-split/kcm-split/shared/testenv"
)

// window is a stretch of one process's life whose audited requests are counted once the run
// is over (reading the audit log while processes run would compete with them for the CPU).
type window struct {
	ua         string
	from, to   time.Time
	idle       bool
	res        *result
	leasesOnly bool
}

var windows []window

// runSide runs one process (ours, or upstream with ctl.upstream) through cold start, idle and
// the churn of every controller in churns.
func (c *cluster) runSide(ctx context.Context, t *testing.T, ctl controller, upstream bool, churns []controller) *result {
	id := c.runID.Add(1)
	var side benchkit.Side
	var flags []string
	for _, ch := range churns {
		flags = append(flags, ch.flags...)
	}
	if upstream {
		flags = append(flags, "--leader-elect=true", fmt.Sprintf("--leader-elect-resource-name=scale-%d", id))
		side = benchkit.UpstreamSide(ctl.upstream, flags...)
		side.Name = "kube-controller-manager[" + ctl.alias + "]"
	} else {
		side = benchkit.Ours(ctl.binary, "github.com/kcm-split/kcm-split/services/"+ctl.pkg, append(flags, "--leader-elect=true")...)
	}
	logf := benchkit.Progress(side.Name)
	bin := side.Executable(t)
	var active []controller
	for _, ch := range churns {
		if !upstream || ch.upstream != "" {
			active = append(active, ch)
		}
	}
	converged := c.prepare(ctx, t, active)
	r := &result{churn: map[string][]time.Duration{}, churnRate: map[string]float64{}}
	proc := side.Start(t, bin, c.env.Kubeconfig)
	if converged != nil {
		at := proc.Await(converged, settleTimeoutFor(c.sz), "the cold start's expected state")
		r.coldConverged = at.Sub(proc.Started)
		logf("converged after %s", r.coldConverged.Round(time.Millisecond))
	}
	r.coldIdle = settle(t, proc, settleTimeoutFor(c.sz))
	r.coldCPU = proc.CPU()
	logf("cold start: idle after %s (CPU %s)", r.coldIdle.Round(time.Millisecond), r.coldCPU.Round(time.Millisecond))

	from, cpu0 := time.Now(), proc.CPU()
	time.Sleep(idleWindow)
	to, cpu1 := time.Now(), proc.CPU()
	m := proc.Memory()
	r.idleRSS, r.idleAnon = m.RSS, m.Anon
	r.idleMilli = float64(cpu1-cpu0) / float64(to.Sub(from)) * 1000
	windows = append(windows, window{ua: side.UserAgent, from: from, to: to, idle: true, res: r})
	logf("idle: RSS %s, RssAnon %s, %.0f millicores", benchkit.MiBString(r.idleRSS), benchkit.MiBString(r.idleAnon), r.idleMilli)

	cpu0 = proc.CPU()
	stop := proc.SampleRSS(&r.loadedRSS, 100*time.Millisecond)
	from = time.Now()
	for _, ch := range active {
		if ch.churn == "" && ch.alias != "servicelb" {
			continue
		}
		lat, also, rate := c.churnOf(ctx, t, ch.alias, id)
		r.churn[ch.alias] = lat
		if rate > 0 {
			r.churnRate[ch.alias] = rate
			logf("churn %s: sent at %.1f/s", ch.alias, rate)
		}
		logf("churn %s: %d samples, p50 %s p99 %s", ch.alias, len(lat), benchkit.MS(benchkit.Percentile(lat, 50)), benchkit.MS(benchkit.Percentile(lat, 99)))
		for k, v := range also {
			r.churn[ch.alias+"/"+k] = v
			logf("churn %s, %s: %d samples, p50 %s p99 %s", ch.alias, k, len(v), benchkit.MS(benchkit.Percentile(v, 50)), benchkit.MS(benchkit.Percentile(v, 99)))
		}
	}
	stop()
	to = time.Now()
	r.churnSeconds = to.Sub(from).Seconds()
	r.churnCPU = proc.CPU() - cpu0
	r.peakRSS = proc.Memory().HWM
	windows = append(windows, window{ua: side.UserAgent, from: from, to: to, res: r, leasesOnly: true})
	proc.Shutdown()
	return r
}

// settle waits until the process uses under settleCPU of a core over settleWindow and returns
// the time from its start to the beginning of that quiet window.
func settle(t *testing.T, p *benchkit.Process, timeout time.Duration) time.Duration {
	deadline := time.Now().Add(timeout)
	prev, prevAt := p.CPU(), time.Now()
	for time.Now().Before(deadline) {
		time.Sleep(settleWindow)
		cpu, at := p.CPU(), time.Now()
		if float64(cpu-prev) < settleCPU*float64(at.Sub(prevAt)) {
			return prevAt.Sub(p.Started)
		}
		prev, prevAt = cpu, at
	}
	t.Errorf("%s never settled within %s", p.Name, timeout)
	return timeout
}

// prepare puts back what a previous side left (Endpoints written, quota status computed) so
// that every side's cold start does the same work, and returns what the cold start must reach.
// Over 80 lines: a switch with one reset-and-wait case per controller, whose conditions are merged into one channel at the end.
func (c *cluster) prepare(ctx context.Context, t *testing.T, active []controller) <-chan time.Time {
	var conds []<-chan time.Time
	for _, ch := range active {
		switch ch.alias {
		case "endpoints":
			nss := c.appNamespaces()
			err := benchkit.Parallel(ctx, len(nss), 8, func(ctx context.Context, i int) error {
				if err := c.client.CoreV1().Endpoints(nss[i]).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
					return err
				}
				return c.client.DiscoveryV1().EndpointSlices(nss[i]).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
			})
			if err != nil {
				t.Fatalf("clearing Endpoints: %v", err)
			}
			<-c.endpoints.WhenAll(func(m map[string]*corev1.Endpoints) bool {
				for k := range m {
					if isAppKey(k) {
						return false
					}
				}
				return true
			})
			want := c.sz.podsPerService
			conds = append(conds, c.endpoints.WhenAll(func(m map[string]*corev1.Endpoints) bool {
				n := 0
				for k, ep := range m {
					if isAppKey(k) && len(ips(ep, true))+len(ips(ep, false)) == want {
						n++
					}
				}
				return n == c.sz.services+c.hotServices
			}))
		case "nodelifecycle":
			// Every Node back to what registration leaves (the
			// admission's not-ready NoSchedule taint, no beta os/arch labels), so both sides
			// do the same start-up writes.
			var names []string
			<-c.nodes.WhenAll(func(m map[string]*corev1.Node) bool {
				for k := range m {
					names = append(names, strings.TrimPrefix(k, "/"))
				}
				return true
			})
			patch := []byte(`{"metadata":{"labels":{"beta.kubernetes.io/os":null,"beta.kubernetes.io/arch":null}},"spec":{"taints":[{"key":"node.kubernetes.io/not-ready","effect":"NoSchedule"}]}}`)
			err := benchkit.Parallel(ctx, len(names), 8, func(ctx context.Context, i int) error {
				_, err := c.client.CoreV1().Nodes().Patch(ctx, names[i], types.MergePatchType, patch, metav1.PatchOptions{})
				return err
			})
			if err != nil {
				t.Fatalf("resetting Nodes: %v", err)
			}
			<-c.nodes.WhenAll(func(m map[string]*corev1.Node) bool {
				for _, n := range m {
					if _, ok := n.Labels["beta.kubernetes.io/os"]; ok || len(n.Spec.Taints) != 1 {
						return false
					}
				}
				return true
			})
			t.Logf("reset %d Nodes", len(names))
			conds = append(conds, c.nodes.WhenAll(func(m map[string]*corev1.Node) bool {
				for _, n := range m {
					if n.Labels["beta.kubernetes.io/os"] == "" || n.Labels["beta.kubernetes.io/arch"] == "" {
						return false
					}
					for _, tn := range n.Spec.Taints {
						if tn.Key == "node.kubernetes.io/not-ready" && tn.Effect == corev1.TaintEffectNoSchedule {
							return false
						}
					}
				}
				return true
			}))
		case "quota":
			nss := c.appNamespaces()
			err := benchkit.Parallel(ctx, len(nss), 8, func(ctx context.Context, i int) error {
				_, err := c.client.CoreV1().ResourceQuotas(nss[i]).Patch(ctx, "compute", types.MergePatchType, []byte(`{"status":null}`), metav1.PatchOptions{}, "status")
				return err
			})
			if err != nil {
				t.Fatalf("clearing quota status: %v", err)
			}
			<-c.quotas.WhenAll(func(m map[string]*corev1.ResourceQuota) bool {
				for _, q := range m {
					if len(q.Status.Used) > 0 {
						return false
					}
				}
				return true
			})
			conds = append(conds, c.quotas.WhenAll(func(m map[string]*corev1.ResourceQuota) bool {
				for _, q := range m {
					if _, ok := q.Status.Used[corev1.ResourcePods]; !ok {
						return false
					}
				}
				return len(m) >= len(c.appNamespaces())
			}))
		}
	}
	if len(conds) == 0 {
		return nil
	}
	out := make(chan time.Time, 1)
	go func() {
		var last time.Time
		for _, ch := range conds {
			if at := <-ch; at.After(last) {
				last = at
			}
		}
		out <- last
	}()
	return out
}

func ips(ep *corev1.Endpoints, ready bool) []string {
	var out []string
	for _, s := range ep.Subsets {
		as := s.Addresses
		if !ready {
			as = s.NotReadyAddresses
		}
		for _, a := range as {
			out = append(out, a.IP)
		}
	}
	return out
}

// churnOf runs alias's churn and returns its reaction times, any further reactions to the
// same writes by name (endpoints: "slices", the flip seen in the EndpointSlices), and the rate
// its writes really went out at where the churn has a set pace (endpoints' flips), else 0.
func (c *cluster) churnOf(ctx context.Context, t *testing.T, alias string, id int64) ([]time.Duration, map[string][]time.Duration, float64) {
	switch alias {
	case "endpoints":
		eps, slices, rate := c.churnEndpoints(ctx, t, id)
		return eps, map[string][]time.Duration{"slices": slices}, rate
	case "nodelifecycle":
		return c.churnNodes(ctx, t), nil, 0
	case "quota":
		return c.churnQuota(ctx, t, id), nil, 0
	case "namespace":
		return c.churnNamespaces(ctx, t), nil, 0
	case "pvbinder":
		return c.churnPVCs(ctx, t, id), nil, 0
	case "servicelb":
		return c.churnLB(ctx, t, id), nil, 0
	}
	return nil, nil, 0
}

// latencies collects reaction times measured by waiters running beside the writes.
type latencies struct {
	mu  sync.Mutex
	wg  sync.WaitGroup
	out []time.Duration
}

// await times seen against from; a reaction that never comes counts as reactTimeout.
func (l *latencies) await(seen <-chan time.Time, from func() time.Time) {
	l.wg.Go(func() {
		var d time.Duration
		select {
		case at := <-seen:
			d = max(0, at.Sub(from()))
		case <-time.After(reactTimeout):
			d = reactTimeout
		}
		l.mu.Lock()
		l.out = append(l.out, d)
		l.mu.Unlock()
	})
}

func (l *latencies) wait() []time.Duration { l.wg.Wait(); return l.out }

func fixed(t time.Time) func() time.Time { return func() time.Time { return t } }

// churnEndpoints turns flips/2 Pods not ready at 50 flips/s, waits until every one of those
// flips has been seen (or timed out), then turns the same Pods ready again at 50 flips/s. A Pod
// is flipped back only once its first flip was answered: flipped back sooner, a controller that
// is behind rightly writes only the Pod's latest state, and the waiter for the state it skipped
// would wait for something that is never coming (it counted as the 3-minute timeout on both
// sides before).
//
// Each flip is timed twice: until the Pod's address is in the other list of its Service's
// Endpoints, and until its endpoint in the Service's EndpointSlices has the new ready
// condition, which is what kube-proxy and every other data plane read.
//
// It also returns the flips/s the patches really went out at: the ticker asks for 50, and a
// slow apiserver answering the harness's patches sends fewer, which is less load on the
// controller (each flip is an Endpoints and an EndpointSlice write for it).
func (c *cluster) churnEndpoints(ctx context.Context, t *testing.T, id int64) ([]time.Duration, []time.Duration, float64) {
	n := c.sz.flips / 2
	base := int(id) * 1009
	var l, ls latencies
	var sending time.Duration
	for _, ready := range []bool{false, true} {
		sendFrom := time.Now()
		tk := time.NewTicker(flipInterval)
		for i := range n {
			<-tk.C
			ref := c.pods[(base+i*97)%len(c.pods)]
			seen := c.endpoints.When(ref.ns+"/"+ref.svc, func(ep *corev1.Endpoints) bool { return slices.Contains(ips(ep, ready), ref.ip) })
			sliceSeen := c.slices.WhenAny(func(s *discoveryv1.EndpointSlice) bool { return sliceHas(s, ref, ready) })
			status := "False"
			if ready {
				status = "True"
			}
			now := time.Now().UTC().Format(time.RFC3339)
			patch := fmt.Sprintf(`{"status":{"conditions":[{"type":"Ready","status":%q,"lastTransitionTime":%q},{"type":"ContainersReady","status":%q,"lastTransitionTime":%q}]}}`, status, now, status, now)
			if _, err := c.client.CoreV1().Pods(ref.ns).Patch(ctx, ref.name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
				tk.Stop()
				t.Errorf("flipping %s/%s: %v", ref.ns, ref.name, err)
				return nil, nil, 0
			}
			at := fixed(time.Now())
			l.await(seen, at)
			ls.await(sliceSeen, at)
		}
		tk.Stop()
		// From the phase's start to its last patch answered: the first flip waits a tick too.
		sending += time.Since(sendFrom)
		l.wg.Wait()
		ls.wg.Wait()
	}
	return l.wait(), ls.wait(), float64(2*n) / sending.Seconds()
}

// sliceHas reports whether s is one of ref's Service's EndpointSlices and lists ref's address
// with the ready condition ready.
func sliceHas(s *discoveryv1.EndpointSlice, ref podRef, ready bool) bool {
	if s.Namespace != ref.ns || s.Labels[discoveryv1.LabelServiceName] != ref.svc {
		return false
	}
	for _, e := range s.Endpoints {
		if slices.Contains(e.Addresses, ref.ip) {
			return (e.Conditions.Ready != nil && *e.Conditions.Ready) == ready
		}
	}
	return false
}

func hasTaint(n *corev1.Node, key string) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == key })
}

// churnNodes stops renewing the failing Nodes' Leases, times grace expiry -> unreachable
// taint, then renews them again and waits for the taints to go.
func (c *cluster) churnNodes(ctx context.Context, t *testing.T) []time.Duration {
	const unreachable = "node.kubernetes.io/unreachable"
	var l latencies
	c.renewer.setStopped(true)
	for i := range c.sz.failingNodes {
		name := failName(i)
		seen := c.nodes.When("/"+name, func(n *corev1.Node) bool { return hasTaint(n, unreachable) })
		l.await(seen, func() time.Time { return c.renewer.lastRenewal(name).Add(grace) })
	}
	out := l.wait()
	c.renewer.setStopped(false)
	// A kubelet that comes back posts Ready again; the Lease alone never clears Unknown.
	for i := range c.sz.failingNodes {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			n, err := c.client.CoreV1().Nodes().Get(ctx, failName(i), metav1.GetOptions{})
			if err != nil {
				return err
			}
			now := metav1.Now()
			for j := range n.Status.Conditions {
				cond := &n.Status.Conditions[j]
				cond.LastHeartbeatTime, cond.LastTransitionTime = now, now
				cond.Status, cond.Reason = corev1.ConditionFalse, "KubeletHasSufficient"
				if cond.Type == corev1.NodeReady {
					cond.Status, cond.Reason = corev1.ConditionTrue, "KubeletReady"
				}
			}
			_, err = c.client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Errorf("posting %s Ready: %v", failName(i), err)
		}
	}
	for i := range c.sz.failingNodes {
		select {
		case <-c.nodes.When("/"+failName(i), func(n *corev1.Node) bool {
			return !hasTaint(n, unreachable) && !hasTaint(n, "node.kubernetes.io/not-ready")
		}):
		case <-time.After(time.Minute):
			t.Logf("%s still tainted a minute after it came back", failName(i))
		}
	}
	return out
}

// churnQuota creates quotaOps Pods in namespaces with a quota (admission charges them), then
// deletes them at 10/s and times delete -> the quota's used Pods back down.
func (c *cluster) churnQuota(ctx context.Context, t *testing.T, id int64) []time.Duration {
	n := min(c.sz.quotaOps, c.sz.appNamespaces())
	names := make([]string, n)
	for i := range n {
		p := benchkit.RealisticPod(appNS(i), fmt.Sprintf("q-%d-%d", id, i), "batch", "", "")
		p.Spec.NodeName = ""
		p.OwnerReferences = nil
		p.Status = corev1.PodStatus{}
		if _, err := c.client.CoreV1().Pods(appNS(i)).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Errorf("creating quota churn Pod: %v", err)
			return nil
		}
		names[i] = p.Name
	}
	time.Sleep(2 * time.Second)
	var l latencies
	zero := int64(0)
	for i := range n {
		q, err := c.client.CoreV1().ResourceQuotas(appNS(i)).Get(ctx, "compute", metav1.GetOptions{})
		if err != nil {
			t.Error(err)
			return nil
		}
		used := q.Status.Used[corev1.ResourcePods]
		want := used.Value() - 1
		seen := c.quotas.When(appNS(i)+"/compute", func(q *corev1.ResourceQuota) bool {
			u := q.Status.Used[corev1.ResourcePods]
			return u.Value() <= want
		})
		if err := c.client.CoreV1().Pods(appNS(i)).Delete(ctx, names[i], metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Error(err)
			return nil
		}
		l.await(seen, fixed(time.Now()))
		time.Sleep(100 * time.Millisecond)
	}
	return l.wait()
}

// churnNamespaces deletes nsDels namespaces holding ConfigMaps, 20/s, and times delete ->
// the namespace gone.
func (c *cluster) churnNamespaces(ctx context.Context, t *testing.T) []time.Duration {
	var l latencies
	for range c.sz.nsDels {
		name := otherNS(c.nsNext)
		c.nsNext++
		key := "/" + name
		seen := c.nsObs.WhenAll(func(m map[string]*corev1.Namespace) bool { _, ok := m[key]; return !ok })
		if err := c.client.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("deleting namespace %s: %v", name, err)
			return nil
		}
		l.await(seen, fixed(time.Now()))
		time.Sleep(50 * time.Millisecond)
	}
	return l.wait()
}

// churnPVCs creates pvcBurst Available PVs, then pvcBurst claims at once, and times claim
// create -> Bound.
func (c *cluster) churnPVCs(ctx context.Context, t *testing.T, id int64) []time.Duration {
	n := c.sz.pvcBurst
	err := benchkit.Parallel(ctx, n, 16, func(ctx context.Context, i int) error {
		name := fmt.Sprintf("burst-%d-%d", id, i)
		_, err := c.client.CoreV1().PersistentVolumes().Create(ctx, &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: pvSpec(name, "standard", nil)}, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		t.Errorf("creating burst PVs: %v", err)
		return nil
	}
	time.Sleep(2 * time.Second)
	var l latencies
	err = benchkit.Parallel(ctx, n, 16, func(ctx context.Context, i int) error {
		name := fmt.Sprintf("claim-%d-%d", id, i)
		seen := c.pvcs.When(burstNS+"/"+name, func(p *corev1.PersistentVolumeClaim) bool { return p.Status.Phase == corev1.ClaimBound })
		_, err := c.client.CoreV1().PersistentVolumeClaims(burstNS).Create(ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: burstNS, Name: name}, Spec: pvcSpec("")}, metav1.CreateOptions{})
		l.await(seen, fixed(time.Now()))
		return err
	})
	if err != nil {
		t.Errorf("creating burst PVCs: %v", err)
		return nil
	}
	return l.wait()
}

const burstNS = "burst"

// churnLB creates 20 LoadBalancer Services and times create -> address.
func (c *cluster) churnLB(ctx context.Context, t *testing.T, id int64) []time.Duration {
	var l latencies
	for i := range 20 {
		s := benchkit.RealisticService(burstNS, fmt.Sprintf("lb-%d-%d", id, i))
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		seen := c.svcs.When(burstNS+"/"+s.Name, func(s *corev1.Service) bool { return len(s.Status.LoadBalancer.Ingress) > 0 })
		if _, err := c.client.CoreV1().Services(burstNS).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Error(err)
			return nil
		}
		l.await(seen, fixed(time.Now()))
		time.Sleep(50 * time.Millisecond)
	}
	return l.wait()
}

var poolGVR = schema.GroupVersionResource{Group: "lb.kcm-split.io", Version: "v1alpha1", Resource: "ipaddresspools"}

// installPoolCRD installs the chart's IPAddressPool CRD and one pool for service-lb-controller.
func installPoolCRD(ctx context.Context, t *testing.T, env *testenv.Env) {
	if err := testenv.InstallCRDs(env.Config, "../../../charts/kcm-split/crds", poolGVR); err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	pool := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "lb.kcm-split.io/v1alpha1", "kind": "IPAddressPool",
		"metadata": map[string]any{"name": "scale"}, "spec": map[string]any{"addresses": []any{"198.18.0.0/16"}}}}
	if _, err := dyn.Resource(poolGVR).Create(ctx, pool, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// countWindows reads the audit log once and fills in each window's request counts.
func countWindows(t *testing.T, env *testenv.Env) {
	evs, err := env.Audit()
	if err != nil {
		t.Errorf("reading the audit log: %v", err)
		return
	}
	for _, w := range windows {
		var reqs, writes, renewals int
		watches := map[string]bool{}
		for _, ev := range evs {
			if !strings.HasPrefix(ev.UserAgent, w.ua) || ev.RequestReceivedTimestamp.Before(w.from) || ev.RequestReceivedTimestamp.After(w.to) {
				continue
			}
			lease := ev.ObjectRef.Resource == "leases"
			switch {
			case lease && ev.IsWrite():
				// Its own Lease's renewals, not the Leases a namespace controller deletes.
				if ev.Succeeded() && (ev.Verb == "update" || ev.Verb == "patch") && ev.ObjectRef.Namespace == metav1.NamespaceSystem {
					renewals++
				}
			case lease:
			case ev.Verb == "watch":
				watches[ev.AuditID] = true
			default:
				reqs++
				if ev.IsWrite() {
					writes++
				}
			}
		}
		secs := w.to.Sub(w.from).Seconds()
		if w.idle {
			w.res.idleReqPerS = float64(reqs) / secs
			w.res.idleWritesPS = float64(writes) / secs
			w.res.idleWatches = len(watches)
		}
		if w.leasesOnly {
			w.res.leaseRenewals = renewals
		}
	}
}
