package drills

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

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

	"github.com/kcm-split/kcm-split/shared/testenv"
)

var env *testenv.Env

// crdDir is where the chart ships the IPAddressPool CRD; the drills install exactly that.
const crdDir = "../../../charts/kcm-split/crds"

func TestMain(m *testing.M) {
	testenv.MainWithOptions(m, &env, testenv.Options{Setup: func(e *testenv.Env) error { return testenv.InstallCRDs(e.Config, crdDir, poolGVR) }})
}

// fastLease makes takeovers take seconds: the drills freeze and kill leaders many times.
var fastLease = []string{
	"--leader-elect-lease-duration=4s",
	"--leader-elect-renew-deadline=3s",
	"--leader-elect-retry-period=500ms",
}

// fixture is one scenario's share of the cluster: its namespace and a run number that keeps
// cluster-scoped names (Nodes, PVs, namespaces) apart between drills.
type fixture struct {
	t   *testing.T
	c   kubernetes.Interface
	dyn dynamic.Interface
	ns  string
	run string
	// last says why settled was last false, for the failure message.
	last string
}

// scenario is one controller under a steady load of changes that make it write.
type scenario struct {
	name string
	bin  testenv.Binary
	args []string
	// setup prepares what the load needs (a Service, a quota, a pool).
	setup func(f *fixture)
	// step makes change number i; each makes the controller write at least once.
	step func(ctx context.Context, f *fixture, i int) error
	// settled reports whether the effects of steps 0..n are all in place: nothing lost.
	settled func(ctx context.Context, f *fixture, n int) (bool, error)
	// invariant fails t if anything is doubled (a range, an address, a binding).
	invariant func(f *fixture)
}

var runs atomic.Int32

func newFixture(t *testing.T) *fixture {
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, c: env.Client(t), dyn: dyn, ns: env.Namespace(t), run: strconv.Itoa(int(runs.Add(1)))}
}

func (f *fixture) name(kind string, i int) string { return fmt.Sprintf("%s-%s-%d", kind, f.run, i) }

func bin(id, alias string) testenv.Binary {
	return testenv.Binary{ID: id, Dir: filepath.Join("..", "..", "..", "services", alias)}
}

func scenarios() []scenario {
	return []scenario{endpointsScenario(), namespaceScenario(), quotaScenario(), nodeScenario(), serviceLBScenario(), pvScenario()}
}

// --- endpoints: Pods come and go behind a Service.

func endpointsScenario() scenario {
	return scenario{
		name: "endpoints",
		bin:  bin("endpoints-controller", "endpoints"),
		setup: func(f *fixture) {
			svc := &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: f.ns},
				Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
					Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
			}
			if _, err := f.c.CoreV1().Services(f.ns).Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
				f.t.Fatal(err)
			}
		},
		step: func(ctx context.Context, f *fixture, i int) error {
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: f.name("web", i), Namespace: f.ns, Labels: map[string]string{"app": "web"}},
				Spec:       corev1.PodSpec{NodeName: "drill-node", Containers: []corev1.Container{{Name: "c", Image: "web"}}},
			}
			out, err := f.c.CoreV1().Pods(f.ns).Create(ctx, pod, metav1.CreateOptions{})
			if err != nil {
				return err
			}
			ip := podIP(i)
			out.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
			if _, err := f.c.CoreV1().Pods(f.ns).UpdateStatus(ctx, out, metav1.UpdateOptions{}); err != nil {
				return err
			}
			if i >= 5 {
				return ignoreNotFound(f.c.CoreV1().Pods(f.ns).Delete(ctx, f.name("web", i-5), metav1.DeleteOptions{GracePeriodSeconds: new(int64)}))
			}
			return nil
		},
		settled: func(ctx context.Context, f *fixture, n int) (bool, error) {
			ep, err := f.c.CoreV1().Endpoints(f.ns).Get(ctx, "web", metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return false, nil
			} else if err != nil {
				return false, err
			}
			want := map[string]bool{}
			for i := max(0, n-4); i <= n; i++ {
				want[podIP(i)] = true
			}
			got := map[string]bool{}
			for _, s := range ep.Subsets {
				for _, a := range s.Addresses {
					got[a.IP] = true
				}
			}
			if !mapsEqual(got, want) {
				f.last = fmt.Sprintf("Endpoints has %v, want %v", keys(got), keys(want))
				return false, nil
			}
			return true, nil
		},
		invariant: func(*fixture) {},
	}
}

func podIP(i int) string {
	return netip.AddrFrom4([4]byte{198, 18, byte(i / 250), byte(1 + i%250)}).String()
}

// --- namespace: namespaces with content are deleted.

func namespaceScenario() scenario {
	return scenario{
		name:  "namespace",
		bin:   bin("namespace-controller", "namespace"),
		setup: func(*fixture) {},
		step: func(ctx context.Context, f *fixture, i int) error {
			name := f.name("drill-ns", i)
			if _, err := f.c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
				return err
			}
			for j := range 3 {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", j), Namespace: name}}
				if _, err := f.c.CoreV1().ConfigMaps(name).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
					return err
				}
			}
			return f.c.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
		},
		settled: func(ctx context.Context, f *fixture, n int) (bool, error) {
			for i := 0; i <= n; i++ {
				_, err := f.c.CoreV1().Namespaces().Get(ctx, f.name("drill-ns", i), metav1.GetOptions{})
				if err == nil {
					return false, nil
				}
				if !apierrors.IsNotFound(err) {
					return false, err
				}
			}
			return true, nil
		},
		invariant: func(*fixture) {},
	}
}

// --- quota: ConfigMaps counted by a ResourceQuota come and go.

func quotaScenario() scenario {
	return scenario{
		name: "quota",
		bin:  bin("quota-controller", "quota"),
		setup: func(f *fixture) {
			q := &corev1.ResourceQuota{
				ObjectMeta: metav1.ObjectMeta{Name: "q", Namespace: f.ns},
				Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"count/configmaps": resource.MustParse("10000")}},
			}
			if _, err := f.c.CoreV1().ResourceQuotas(f.ns).Create(context.Background(), q, metav1.CreateOptions{}); err != nil {
				f.t.Fatal(err)
			}
		},
		step: func(ctx context.Context, f *fixture, i int) error {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: f.name("cm", i), Namespace: f.ns}}
			if _, err := f.c.CoreV1().ConfigMaps(f.ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
				return err
			}
			if i%2 == 1 {
				return ignoreNotFound(f.c.CoreV1().ConfigMaps(f.ns).Delete(ctx, f.name("cm", i-1), metav1.DeleteOptions{}))
			}
			return nil
		},
		settled: func(ctx context.Context, f *fixture, n int) (bool, error) {
			list, err := f.c.CoreV1().ConfigMaps(f.ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err
			}
			q, err := f.c.CoreV1().ResourceQuotas(f.ns).Get(ctx, "q", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			used := q.Status.Used["count/configmaps"]
			return used.Value() == int64(len(list.Items)), nil
		},
		invariant: func(*fixture) {},
	}
}

// --- nodelifecycle: Nodes register and get Pod ranges (node IPAM on).

func nodeScenario() scenario {
	return scenario{
		name:  "nodelifecycle",
		bin:   bin("nodelifecycle-controller", "nodelifecycle"),
		args:  []string{"--allocate-node-cidrs", "--cluster-cidr=198.19.0.0/16", "--node-cidr-mask-size=26"},
		setup: func(*fixture) {},
		step: func(ctx context.Context, f *fixture, i int) error {
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: f.name("node", i), Labels: map[string]string{"drill": f.run}}}
			// At most 40 live Nodes of a run: ranges are freed and handed out again.
			_, err := f.c.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
			if err == nil && i >= 40 {
				err = ignoreNotFound(f.c.CoreV1().Nodes().Delete(ctx, f.name("node", i-40), metav1.DeleteOptions{}))
			}
			return err
		},
		settled: func(ctx context.Context, f *fixture, n int) (bool, error) {
			nodes, err := f.c.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "drill=" + f.run})
			if err != nil {
				return false, err
			}
			for _, node := range nodes.Items {
				if node.Spec.PodCIDR == "" {
					return false, nil
				}
			}
			return true, nil
		},
		invariant: func(f *fixture) {
			nodes, err := f.c.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
			if err != nil {
				f.t.Fatal(err)
			}
			var ranges []netip.Prefix
			owner := map[netip.Prefix]string{}
			for _, node := range nodes.Items {
				for _, s := range node.Spec.PodCIDRs {
					p, err := netip.ParsePrefix(s)
					if err != nil {
						f.t.Fatalf("Node %s has podCIDR %q: %v", node.Name, s, err)
					}
					for _, q := range ranges {
						if q.Overlaps(p) {
							f.t.Errorf("Nodes %s and %s have overlapping ranges %s and %s", owner[q], node.Name, q, p)
						}
					}
					ranges = append(ranges, p)
					owner[p] = node.Name
				}
			}
		},
	}
}

// --- servicelb: LoadBalancer Services get addresses from a pool.

var poolGVR = schema.GroupVersionResource{Group: "lb.kcm-split.io", Version: "v1alpha1", Resource: "ipaddresspools"}

func serviceLBScenario() scenario {
	return scenario{
		name: "servicelb",
		bin:  bin("service-lb-controller", "servicelb"),
		setup: func(f *fixture) {
			pool := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "lb.kcm-split.io/v1alpha1", "kind": "IPAddressPool",
				"metadata": map[string]any{"name": "drill-" + f.ns},
				"spec":     map[string]any{"addresses": []any{"192.0.2.0/24"}, "namespaces": []any{f.ns}},
			}}
			if _, err := f.dyn.Resource(poolGVR).Create(context.Background(), pool, metav1.CreateOptions{}); err != nil {
				f.t.Fatal(err)
			}
			f.t.Cleanup(func() {
				_ = f.dyn.Resource(poolGVR).Delete(context.Background(), "drill-"+f.ns, metav1.DeleteOptions{})
			})
		},
		step: func(ctx context.Context, f *fixture, i int) error {
			svc := &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: f.name("lb", i), Namespace: f.ns},
				Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
					Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
			}
			// At most 30 live: the pool has 254 addresses, and a freed address is handed out
			// again (released and claimed across crashes).
			_, err := f.c.CoreV1().Services(f.ns).Create(ctx, svc, metav1.CreateOptions{})
			if err == nil && i >= 30 {
				err = ignoreNotFound(f.c.CoreV1().Services(f.ns).Delete(ctx, f.name("lb", i-30), metav1.DeleteOptions{}))
			}
			return err
		},
		settled: func(ctx context.Context, f *fixture, n int) (bool, error) {
			list, err := f.c.CoreV1().Services(f.ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err
			}
			for _, s := range list.Items {
				if s.Spec.Type == corev1.ServiceTypeLoadBalancer && s.DeletionTimestamp == nil && len(s.Status.LoadBalancer.Ingress) == 0 {
					return false, nil
				}
			}
			return true, nil
		},
		invariant: func(f *fixture) {
			list, err := f.c.CoreV1().Services("").List(context.Background(), metav1.ListOptions{})
			if err != nil {
				f.t.Fatal(err)
			}
			owner := map[string]string{}
			for _, s := range list.Items {
				for _, in := range s.Status.LoadBalancer.Ingress {
					if o, dup := owner[in.IP]; dup {
						f.t.Errorf("address %s on both %s and %s/%s", in.IP, o, s.Namespace, s.Name)
					}
					owner[in.IP] = s.Namespace + "/" + s.Name
				}
			}
		},
	}
}

// --- pvbinder: claims bind to matching volumes.

func pvScenario() scenario {
	class := func(f *fixture) string { return "drill-" + f.run }
	return scenario{
		name:  "pvbinder",
		bin:   bin("pv-binder-controller", "pvbinder"),
		setup: func(*fixture) {},
		step: func(ctx context.Context, f *fixture, i int) error {
			pv := &corev1.PersistentVolume{
				ObjectMeta: metav1.ObjectMeta{Name: f.name("pv", i), Labels: map[string]string{"drill": f.run}},
				Spec: corev1.PersistentVolumeSpec{
					Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
					AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
					StorageClassName:              class(f),
					PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp/" + f.name("pv", i)}},
				},
			}
			if _, err := f.c.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
				return err
			}
			sc := class(f)
			pvc := &corev1.PersistentVolumeClaim{
				ObjectMeta: metav1.ObjectMeta{Name: f.name("claim", i), Namespace: f.ns},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					StorageClassName: &sc,
					Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
				},
			}
			_, err := f.c.CoreV1().PersistentVolumeClaims(f.ns).Create(ctx, pvc, metav1.CreateOptions{})
			return err
		},
		settled: func(ctx context.Context, f *fixture, n int) (bool, error) {
			claims, err := f.c.CoreV1().PersistentVolumeClaims(f.ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err
			}
			for _, c := range claims.Items {
				if c.Status.Phase != corev1.ClaimBound {
					return false, nil
				}
			}
			return len(claims.Items) > 0, nil
		},
		invariant: func(f *fixture) {
			ctx := context.Background()
			pvs, err := f.c.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{LabelSelector: "drill=" + f.run})
			if err != nil {
				f.t.Fatal(err)
			}
			byClaim := map[string]string{}
			for _, pv := range pvs.Items {
				if ref := pv.Spec.ClaimRef; ref != nil {
					key := ref.Namespace + "/" + ref.Name
					if other, dup := byClaim[key]; dup {
						f.t.Errorf("claim %s bound by both %s and %s", key, other, pv.Name)
					}
					byClaim[key] = pv.Name
				}
			}
			claims, err := f.c.CoreV1().PersistentVolumeClaims(f.ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				f.t.Fatal(err)
			}
			for _, c := range claims.Items {
				if c.Spec.VolumeName == "" {
					continue
				}
				if pv := byClaim[c.Namespace+"/"+c.Name]; pv != c.Spec.VolumeName {
					f.t.Errorf("claim %s names volume %s, but that volume's claimRef is %q", c.Name, c.Spec.VolumeName, pv)
				}
			}
		},
	}
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func mapsEqual(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

// load runs sc.step every period from index from until ctx ends, and returns the last index
// it completed. Errors are counted, not fatal: during a fault the apiserver may refuse some.
type load struct {
	last   atomic.Int64
	errors atomic.Int64
	done   chan struct{}
}

func startLoad(ctx context.Context, f *fixture, sc scenario, from int, period time.Duration) *load {
	l := &load{done: make(chan struct{})}
	l.last.Store(int64(from - 1))
	go func() {
		defer close(l.done)
		t := time.NewTicker(period)
		defer t.Stop()
		for i := from; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			// A step runs to its end even when the load is stopped meanwhile: a step cut in
			// half (a Pod created, the older one not yet deleted) would look like lost work.
			sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := sc.step(sctx, f, i)
			cancel()
			if err != nil {
				l.errors.Add(1)
				f.t.Logf("load step %d: %v", i, err)
				continue
			}
			l.last.Store(int64(i))
		}
	}()
	return l
}

// waitSettled waits until every effect of steps 0..n is in place, failing t after timeout.
func waitSettled(t *testing.T, f *fixture, sc scenario, n int, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		return sc.settled(ctx, f, n)
	})
	if err != nil {
		t.Fatalf("%s: the effects of steps 0..%d are not all in place after %s (something was lost): %v %s", sc.name, n, timeout, err, f.last)
	}
	return time.Since(start)
}
