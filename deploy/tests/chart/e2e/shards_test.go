package e2e

// The shard count changed with helm upgrade on the real node (issue 35 item 3): endpoints
// installed with controllers.endpoints.shards=2, upgraded to 4, then back to one replica
// (shards=1 with shardLayoutFence). Asserted from one watch of every Lease of the release
// namespace (one resourceVersion order): no Lease of the new layout gets a holder while a
// Lease of the old layout is held and unexpired; every shard Lease ends held by a Ready Pod of
// its own Deployment; the old Deployments are gone; Endpoints of Services in namespaces of
// different shards stay right and follow a change after each step. Timings are FIGURE lines.

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kcm-split/kcm-split/shared/sharding"
)

const epBinary = "endpoints-controller"

// chartHash is the chart's default controllers.endpoints.shardHash, which this suite leaves as
// it is (chart_test checks the default's render; a change of hash is fenced as a change of
// shards, TestLayoutChangeHash in services/endpoints).
const chartHash = sharding.HashMixed

// shardLease is the Lease shard i of n elects on (the binary's naming, shared/sharding).
func shardLease(i, n int) string {
	return sharding.Shard{Index: i, Count: n, Hash: chartHash}.LeaseName(epBinary)
}

// leaseLog follows every Lease of the namespace from one watch and checks the layout rule
// on each event: a Lease of layout `to` getting a holder while a Lease of another layout is
// held and its renewTime + leaseDuration is after the new holder's acquireTime is a
// violation. It also remembers when each old Lease was released.
type leaseLog struct {
	mu         sync.Mutex
	last       map[string]coordv1.Lease
	violations []string
	released   map[string]time.Time // old Lease -> renewTime of its release record
	acquired   map[string]time.Time // Lease -> acquireTime when first seen held by the new layout
	layouts    map[string]int       // Lease name -> shard count of its layout
	to         int
	since      time.Time // acquisitions before it are an earlier install's (a Lease left expired)
}

func (s *suite) followLeases(layouts map[string]int, to int) *leaseLog {
	s.t.Helper()
	ll := &leaseLog{last: map[string]coordv1.Lease{}, released: map[string]time.Time{}, acquired: map[string]time.Time{}, layouts: layouts, to: to,
		since: time.Now().Add(-time.Second)}
	w, err := s.cs.CoordinationV1().Leases(ns).Watch(s.ctx, metav1.ListOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	go func() {
		for ev := range w.ResultChan() {
			if ev.Type != watch.Added && ev.Type != watch.Modified {
				continue
			}
			if l, ok := ev.Object.(*coordv1.Lease); ok {
				ll.observe(l)
			}
		}
	}()
	s.t.Cleanup(w.Stop)
	return ll
}

func held(l coordv1.Lease) bool { return l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" }

func (ll *leaseLog) observe(l *coordv1.Lease) {
	ll.mu.Lock()
	defer ll.mu.Unlock()
	n, ours := ll.layouts[l.Name]
	if !ours {
		return
	}
	ll.last[l.Name] = *l.DeepCopy()
	if n != ll.to {
		if !held(*l) && l.Spec.RenewTime != nil {
			ll.released[l.Name] = l.Spec.RenewTime.Time
		}
		return
	}
	if !held(*l) || l.Spec.AcquireTime == nil || l.Spec.AcquireTime.Time.Before(ll.since) {
		return
	}
	acq := l.Spec.AcquireTime.Time
	if _, seen := ll.acquired[l.Name]; !seen {
		ll.acquired[l.Name] = acq
	}
	for name, o := range ll.last {
		if ll.layouts[name] == ll.to || !held(o) {
			continue
		}
		if o.Spec.RenewTime == nil || o.Spec.LeaseDurationSeconds == nil {
			ll.violations = append(ll.violations, fmt.Sprintf("%s acquired while %s was held with no renewTime or duration", l.Name, name))
			continue
		}
		until := o.Spec.RenewTime.Add(time.Duration(*o.Spec.LeaseDurationSeconds) * time.Second)
		if acq.Before(until) {
			ll.violations = append(ll.violations, fmt.Sprintf("%s acquired by %s at %s while %s (%d shards) was held by %s, renewed %s (lease %ds)",
				l.Name, holderPod(*l.Spec.HolderIdentity), acq.Format(time.RFC3339Nano), name, ll.layouts[name], holderPod(*o.Spec.HolderIdentity),
				o.Spec.RenewTime.Format(time.RFC3339Nano), *o.Spec.LeaseDurationSeconds))
		}
	}
}

// shardPods are the Ready Pods of shard i of n (their layout labels), by name.
func (s *suite) shardPods(i, n int) map[string]bool {
	s.t.Helper()
	sel := instance + ",app.kubernetes.io/component=" + epBinary
	if n > 1 {
		sel += fmt.Sprintf(",kcm-split.io/shards=%d,kcm-split.io/shard-index=%d", n, i)
	}
	l, err := s.cs.CoreV1().Pods(ns).List(s.ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		s.t.Fatal(err)
	}
	out := map[string]bool{}
	for i := range l.Items {
		if podReady(&l.Items[i]) {
			out[l.Items[i].Name] = true
		}
	}
	return out
}

// waitLayout waits until every Lease of the n-shard layout is held by a Ready Pod of its
// own shard, and the endpoints Pods are exactly those of that layout (old ones gone).
func (s *suite) waitLayout(n int) {
	s.t.Helper()
	s.poll(fmt.Sprintf("endpoints: %d shard Leases held by their own shards' Ready Pods, no other Pod", n), 3*time.Minute, func() (bool, error) {
		want := 0
		for i := 0; i < n; i++ {
			pods := s.shardPods(i, n)
			want += len(pods)
			l, err := s.cs.CoordinationV1().Leases(ns).Get(s.ctx, shardLease(i, n), metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if !held(*l) || !pods[holderPod(*l.Spec.HolderIdentity)] {
				return false, fmt.Errorf("Lease %s held by %v, Ready Pods of the shard %v", l.Name, l.Spec.HolderIdentity, pods)
			}
			if n > 1 || l.Labels[sharding.LabelShards] != "" {
				if l.Labels[sharding.LabelShards] != fmt.Sprint(n) || l.Labels[sharding.LabelIndex] != fmt.Sprint(i) {
					return false, fmt.Errorf("Lease %s labels %v", l.Name, l.Labels)
				}
			}
		}
		if all := s.pods(epBinary); len(all) != want {
			return false, fmt.Errorf("%d endpoints Pods, %d of the %d-shard layout Ready", len(all), want, n)
		}
		return true, nil
	})
}

// shardNamespaces picks one namespace name per shard of 4 (so 2 per shard of 2), so every
// shard of both sharded layouts has a Service. FNV-1a's high bits barely depend on a name's
// last bytes (shared/README.md, "Hash skew"): the names differ by their first letter.
func shardNamespaces() []string {
	var out []string
	taken := map[int]bool{}
	for c := 'a'; c <= 'z' && len(taken) < 4; c++ {
		name := string(c) + "-shards-e2e"
		if i := shardOf(name, 4); !taken[i] {
			taken[i] = true
			out = append(out, name)
		}
	}
	return out
}

func shardOf(namespace string, n int) int {
	for i := 0; i < n; i++ {
		if (sharding.Shard{Index: i, Count: n, Hash: chartHash}).Owns(namespace) {
			return i
		}
	}
	return -1
}

// webIn creates a Deployment of one Pod on the real node behind a Service in namespace.
func (s *suite) webIn(namespace string) {
	s.t.Helper()
	s.createNS(namespace)
	labels := map[string]string{"app": "web"}
	one := int32(1)
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: namespace},
		Spec: appsv1.DeploymentSpec{
			Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector:                  map[string]string{"type": "real"},
					TerminationGracePeriodSeconds: ptr(int64(1)),
					Containers: []corev1.Container{{
						Name: "web", Image: s.cfg.workload, Args: s.cfg.workloadArgs,
						ImagePullPolicy: corev1.PullIfNotPresent,
						Ports:           []corev1.ContainerPort{{ContainerPort: 8080}},
						Resources:       corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m")}},
					}},
				},
			},
		},
	}
	if _, err := s.cs.AppsV1().Deployments(namespace).Create(s.ctx, d, metav1.CreateOptions{}); err != nil {
		s.t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: namespace},
		Spec:       corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
	if _, err := s.cs.CoreV1().Services(namespace).Create(s.ctx, svc, metav1.CreateOptions{}); err != nil {
		s.t.Fatal(err)
	}
}

// scaleWeb sets the web Deployment's replicas and waits until the Service's Endpoints and
// EndpointSlices list exactly its Ready Pods' IPs (n of them): the shard owning the
// namespace acted on the change.
func (s *suite) scaleWeb(namespace string, n int32) {
	s.t.Helper()
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, n)
	if _, err := s.cs.AppsV1().Deployments(namespace).Patch(s.ctx, "web", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		s.t.Fatal(err)
	}
	s.poll(fmt.Sprintf("%s/web: Endpoints and EndpointSlices list its %d Ready Pods", namespace, n), 2*time.Minute, func() (bool, error) {
		ps, err := s.cs.CoreV1().Pods(namespace).List(s.ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return false, err
		}
		var podIPs []string
		for i := range ps.Items {
			if !podReady(&ps.Items[i]) {
				return false, fmt.Errorf("Pod %s not Ready", ps.Items[i].Name)
			}
			podIPs = append(podIPs, ps.Items[i].Status.PodIP)
		}
		if len(podIPs) != int(n) {
			return false, fmt.Errorf("%d Pods", len(podIPs))
		}
		sort.Strings(podIPs)
		ep, err := s.cs.CoreV1().Endpoints(namespace).Get(s.ctx, "web", metav1.GetOptions{}) //nolint:staticcheck // the v1 Endpoints are what the endpoints controller writes
		if err != nil {
			return false, err
		}
		var ips []string
		for _, ss := range ep.Subsets {
			for _, a := range ss.Addresses {
				ips = append(ips, a.IP)
			}
		}
		sort.Strings(ips)
		if strings.Join(ips, ",") != strings.Join(podIPs, ",") {
			return false, fmt.Errorf("Endpoints %v, Pods %v", ips, podIPs)
		}
		sl, err := s.cs.DiscoveryV1().EndpointSlices(namespace).List(s.ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=web"})
		if err != nil {
			return false, err
		}
		ips = nil
		for _, x := range sl.Items {
			for _, e := range x.Endpoints {
				if e.Conditions.Ready != nil && *e.Conditions.Ready {
					ips = append(ips, e.Addresses...)
				}
			}
		}
		sort.Strings(ips)
		if strings.Join(ips, ",") != strings.Join(podIPs, ",") {
			return false, fmt.Errorf("EndpointSlices %v, Pods %v", ips, podIPs)
		}
		return true, nil
	})
}

// changeLayout runs helm upgrade to the `to` layout and checks the rule from the Lease watch
// started before it; returns when the new layout leads and the old Pods are gone.
func (s *suite) changeLayout(from, to int, set ...string) {
	s.t.Helper()
	layouts := map[string]int{}
	for _, n := range []int{from, to} {
		for i := 0; i < n; i++ {
			layouts[shardLease(i, n)] = n
		}
	}
	ll := s.followLeases(layouts, to)
	s.keepLogs(epBinary)
	start := time.Now()
	args := append([]string{"upgrade", release, s.chart.Dir, "-n", ns, "--reuse-values"}, set...)
	s.helm(args...)
	s.waitLayout(to)
	took := time.Since(start)
	// The watch may deliver the last acquisitions after the poll saw them.
	s.poll("the Lease watch saw every new Lease held", 30*time.Second, func() (bool, error) {
		ll.mu.Lock()
		defer ll.mu.Unlock()
		if len(ll.acquired) < to {
			return false, fmt.Errorf("%d of %d", len(ll.acquired), to)
		}
		return true, nil
	})
	ll.mu.Lock()
	defer ll.mu.Unlock()
	for _, v := range ll.violations {
		s.t.Errorf("%d -> %d shards: %s", from, to, v)
	}
	var lastRelease, firstAcquire time.Time
	how := map[string]string{}
	for i := 0; i < from; i++ {
		name := shardLease(i, from)
		if r, ok := ll.released[name]; ok {
			how[name] = "released"
			if r.After(lastRelease) {
				lastRelease = r
			}
		} else {
			how[name] = "not released (expired or still held when the new layout led: see violations)"
		}
	}
	for _, a := range ll.acquired {
		if firstAcquire.IsZero() || a.Before(firstAcquire) {
			firstAcquire = a
		}
	}
	s.t.Logf("%d -> %d shards: old Leases %v", from, to, how)
	figure(s.t, fmt.Sprintf("shards %d -> %d: helm upgrade until every new shard Lease is held and the old Pods are gone", from, to), took)
	if !lastRelease.IsZero() && !firstAcquire.IsZero() {
		figure(s.t, fmt.Sprintf("shards %d -> %d: last old Lease released to first new Lease acquired (Lease times)", from, to), firstAcquire.Sub(lastRelease))
	}
}

func TestChartShardsE2E(t *testing.T) {
	if os.Getenv(enableEnv) != "1" {
		t.Skipf("chart end-to-end needs a real node: run `make chart-e2e` (root; it sets %s=1)", enableEnv)
	}
	s := newSuite(t, 10*time.Minute, false)
	cfg := s.cfg
	begin := time.Now()

	// --- install: endpoints in 2 shards, one replica per shard --------------------------------
	installed := false
	t.Cleanup(func() {
		if installed {
			_, _ = s.helmOut("uninstall", release, "-n", ns, "--wait", "--timeout", "2m")
		}
	})
	start := time.Now()
	s.helm("install", release, s.chart.Dir, "-n", ns,
		"--set", "controllers.endpoints.enabled=true",
		"--set", "controllers.endpoints.shards=2",
		"--set", "controllers.endpoints.replicas=1",
		"--set", "defaults.image.registry="+cfg.registry,
		"--set-string", "defaults.image.tag="+cfg.tag,
		"--set", "defaults.nodeSelector.type=real")
	installed = true
	s.waitLayout(2)
	figure(t, "shards: install to both shard Leases held (endpoints, 2 shards x 1 replica)", time.Since(start))

	nss := shardNamespaces()
	if len(nss) != 4 {
		t.Fatalf("namespaces %v: want one per shard of 4", nss)
	}
	for _, n := range nss {
		t.Logf("namespace %s: shard %d of 2, %d of 4", n, shardOf(n, 2), shardOf(n, 4))
		s.webIn(n)
	}
	for _, n := range nss {
		s.scaleWeb(n, 1)
	}

	// --- 2 -> 4: the 2-shard Deployments go, the 4 new ones wait for their Leases -----------
	s.changeLayout(2, 4, "--set", "controllers.endpoints.shards=4")
	for _, n := range nss {
		s.scaleWeb(n, 2)
	}

	// --- 4 -> 1: one Deployment again, with --shards=1 so it waits for the 4 shards --------
	s.changeLayout(4, 1, "--set", "controllers.endpoints.shards=1", "--set", "controllers.endpoints.shardLayoutFence=true")
	for _, n := range nss {
		s.scaleWeb(n, 1)
	}

	s.helm("uninstall", release, "-n", ns, "--wait", "--timeout", "2m")
	installed = false
	figure(t, "shards: the whole sharding step (install, 2 -> 4 -> 1, Endpoints after each)", time.Since(begin))
}
