package scale

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/kcm-split/kcm-split/shared/benchkit"
	"github.com/kcm-split/kcm-split/shared/sharding"
	"github.com/kcm-split/kcm-split/shared/testenv"
)

// size is one cluster size of issue 22.
type size struct {
	name                         string
	nodes, services, namespaces  int // Pods are services * podsPerService
	configMaps, pvPairs, nsDels  int
	flips, quotaOps, pvcBurst    int
	podsPerService, failingNodes int
}

func (s size) pods() int          { return s.services * s.podsPerService }
func (s size) appNamespaces() int { return s.services / servicesPerNS }

const servicesPerNS = 10

var sizes = map[string]size{
	// XS checks the harness in a few minutes and gives a second point for the growth rows.
	"XS": {name: "XS", nodes: 50, services: 100, namespaces: 200, configMaps: 2000, pvPairs: 100, nsDels: 30, flips: 500, quotaOps: 20, pvcBurst: 50, podsPerService: 10, failingNodes: 5},
	"S":  {name: "S", nodes: 500, services: 1000, namespaces: 2000, configMaps: 20000, pvPairs: 1000, nsDels: 100, flips: 500, quotaOps: 50, pvcBurst: 50, podsPerService: 10, failingNodes: 5},
	"M":  {name: "M", nodes: 2000, services: 4000, namespaces: 2000, configMaps: 20000, pvPairs: 1000, nsDels: 100, flips: 500, quotaOps: 50, pvcBurst: 50, podsPerService: 10, failingNodes: 5},
	"L":  {name: "L", nodes: 5000, services: 10000, namespaces: 2000, configMaps: 20000, pvPairs: 1000, nsDels: 100, flips: 500, quotaOps: 50, pvcBurst: 50, podsPerService: 10, failingNodes: 5},
}

// Pacing, the same for every side.
const (
	flipInterval = 20 * time.Millisecond // 50 readiness flips/s
	grace        = 40 * time.Second      // --node-monitor-grace-period on both sides
	idleWindow   = 20 * time.Second
	settleWindow = 3 * time.Second
	settleCPU    = 0.05 // a process is idle once it uses under 5% of a core over settleWindow
	// settleTimeout bounds a cold start at up to 40,000 Pods; larger sizes get it in proportion
	// (settleTimeoutFor): upstream's endpoints side alone took 9 minutes at L.
	settleTimeout = 10 * time.Minute
	reactTimeout  = 3 * time.Minute
	createWorkers = 32
	scaleUA       = "kcm-split-scale/"
)

// controller is one kcm-split binary and its upstream counterpart.
type controller struct {
	alias, binary, pkg string
	upstream           string // upstream's --controllers; "" when upstream has no counterpart
	flags              []string
	churn              string // name of its churn's latency row
}

var controllers = []controller{
	{alias: "endpoints", binary: "endpoints-controller", pkg: "endpoints/cmd/endpoints-controller", upstream: "endpoints-controller,endpointslice-controller", churn: "readiness flip -> Endpoints"},
	{alias: "nodelifecycle", binary: "nodelifecycle-controller", pkg: "nodelifecycle/cmd/nodelifecycle-controller", upstream: "node-lifecycle-controller,taint-eviction-controller",
		flags: []string{"--node-monitor-grace-period=" + grace.String()}, churn: "Node failure -> unreachable taint (past grace)"},
	{alias: "quota", binary: "quota-controller", pkg: "quota/cmd/quota-controller", upstream: "resourcequota-controller", churn: "Pod create/delete -> quota used"},
	{alias: "namespace", binary: "namespace-controller", pkg: "namespace/cmd/namespace-controller", upstream: "namespace-controller", churn: "namespace delete -> gone"},
	{alias: "servicelb", binary: "service-lb-controller", pkg: "servicelb/cmd/service-lb-controller", churn: ""},
	{alias: "pvbinder", binary: "pv-binder-controller", pkg: "pvbinder/cmd/pv-binder-controller", upstream: "persistentvolume-binder-controller", churn: "PVC burst -> Bound"},
}

// result is what one process measured.
type result struct {
	coldIdle      time.Duration // start -> CPU settled (first full pass done)
	coldConverged time.Duration // start -> the expected state observed (endpoints, quota); 0 n/a
	coldCPU       time.Duration
	idleMilli     float64 // CPU millicores over the idle window
	idleRSS       int64
	idleAnon      int64
	idleReqPerS   float64 // non-watch requests/s at idle, Lease renewals excluded
	idleWritesPS  float64 // writes/s at idle, Lease renewals excluded
	idleWatches   int     // watch requests (re)started in the idle window
	churn         map[string][]time.Duration
	churnRate     map[string]float64 // writes/s a paced churn really sent, by alias (endpoints: flips)
	churnSeconds  float64
	churnCPU      time.Duration
	loadedRSS     int64 // max VmRSS during churn
	peakRSS       int64 // VmHWM at the end
	leaseRenewals int   // successful Lease writes during churn
}

// cluster is the shared state of one run.
type cluster struct {
	sz        size
	env       *testenv.Env
	client    kubernetes.Interface
	pods      []podRef // the Services' Pods
	endpoints *benchkit.Observer[*corev1.Endpoints]
	slices    *benchkit.Observer[*discoveryv1.EndpointSlice]
	nodes     *benchkit.Observer[*corev1.Node]
	quotas    *benchkit.Observer[*corev1.ResourceQuota]
	nsObs     *benchkit.Observer[*corev1.Namespace]
	pvcs      *benchkit.Observer[*corev1.PersistentVolumeClaim]
	svcs      *benchkit.Observer[*corev1.Service]
	renewer   *renewer
	nsNext    int // next namespace index to delete
	// hotServices (sharded runs) Services of podsPerService Pods each in hotNS; their Pods are
	// in hotPods, not in pods, so that the churns pick the size's Pods as before.
	hotServices int
	hotPods     []podRef
	// flipNext and notReady (by Pod IP, guarded by mu): the sharded runs' ramp and takeover
	// flips, each Pod turned to the opposite of what the harness last set.
	flipNext int
	mu       sync.Mutex
	notReady map[int]bool
	bins     map[string]string // built binaries by alias
	runID    atomic.Int64
	logf     func(string, ...any)
}

type podRef struct{ ns, name, svc, ip string }

// appNames are the application namespaces' names, as clusters name them (teams and
// environments, tenants, add-ons, previews, random; sharding.RealisticNamespaces): the sharded
// runs measure the spread the hashes give on them (TestShards prints it). L has 1,000.
// Unsharded runs read no namespace name.
var appNames = sharding.RealisticNamespaces(1000)

// appNameSet holds appNames and hotNS: the namespaces whose Endpoints a cold start waits for.
var appNameSet = func() map[string]bool {
	m := map[string]bool{hotNS: true}
	for _, ns := range appNames {
		m[ns] = true
	}
	return m
}()

func appNS(i int) string   { return appNames[i] }
func otherNS(i int) string { return fmt.Sprintf("team-%04d", i) }

// hotNS is the sharded runs' hot namespace (hotServices Services of podsPerService Pods).
const hotNS = "hot-app"

// isAppKey reports whether an informer key ("namespace/name") is in an application namespace.
func isAppKey(k string) bool {
	ns, _, _ := strings.Cut(k, "/")
	return appNameSet[ns]
}

// appNamespaces lists every namespace holding Services, Pods and a quota: the size's and, in
// a sharded run, the hot one.
func (c *cluster) appNamespaces() []string {
	out := make([]string, 0, c.sz.appNamespaces()+1)
	for i := range c.sz.appNamespaces() {
		out = append(out, appNS(i))
	}
	if c.hotServices > 0 {
		out = append(out, hotNS)
	}
	return out
}

// Over 80 lines: the env read, then one control plane whose fixtures and observers every side reuses in turn, the report rewritten after each side.
func TestScale(t *testing.T) {
	name := os.Getenv("SCALE_SIZE")
	if name == "" {
		t.Skip("run by `make scale SIZE=S|M|L` (SCALE_SIZE unset)")
	}
	sz, ok := sizes[name]
	if !ok {
		t.Fatalf("SCALE_SIZE=%s: want XS, S, M or L", name)
	}
	// Comma-separated aliases; empty means all, upstream's every-controller run included.
	// "all" in a list adds that run to a subset.
	only := os.Getenv("SCALE_CONTROLLERS")
	for _, a := range strings.Split(only, ",") {
		if a != "" && a != "all" && !slices.ContainsFunc(controllers, func(c controller) bool { return c.alias == a }) {
			t.Fatalf("SCALE_CONTROLLERS: unknown controller %q; want a comma-separated list of endpoints, nodelifecycle, quota, namespace, servicelb, pvbinder, all", a)
		}
	}
	// SCALE_OURS_ONLY skips upstream's per-controller sides: a run that only sets the six binaries
	// beside upstream's every-controller process (with "all"), when the pairs are already measured.
	oursOnly := os.Getenv("SCALE_OURS_ONLY") != ""
	logf := benchkit.Progress("scale " + sz.name)
	env, err := testenv.Start(testenv.Options{AuditPolicy: auditAll, ExtraAPIServerArgs: []string{"--max-requests-inflight=800", "--max-mutating-requests-inflight=400",
		// The audit log rotates at 100 MB by default, and only the current file is read.
		"--audit-log-maxsize=100000"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Stop)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // before the observers' cleanups, which wait for their informers to stop
	c := &cluster{sz: sz, env: env, client: fastClient(t, env, "fixtures"), logf: logf}
	startKwok(t, env)
	start := time.Now()
	c.createFixtures(ctx, t)
	logf("fixtures done in %s", time.Since(start).Round(time.Second))
	watch := fastClient(t, env, "watch")
	c.endpoints = benchkit.NewObserver[*corev1.Endpoints](ctx, t, watch, "", func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
		return f.Core().V1().Endpoints().Informer()
	})
	c.slices = benchkit.NewObserver[*discoveryv1.EndpointSlice](ctx, t, watch, "", func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
		return f.Discovery().V1().EndpointSlices().Informer()
	})
	c.nodes = benchkit.NewObserver[*corev1.Node](ctx, t, watch, "", func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
		return f.Core().V1().Nodes().Informer()
	})
	c.quotas = benchkit.NewObserver[*corev1.ResourceQuota](ctx, t, watch, "", func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
		return f.Core().V1().ResourceQuotas().Informer()
	})
	c.nsObs = benchkit.NewObserver[*corev1.Namespace](ctx, t, watch, "", func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
		return f.Core().V1().Namespaces().Informer()
	})
	c.pvcs = benchkit.NewObserver[*corev1.PersistentVolumeClaim](ctx, t, watch, "", func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
		return f.Core().V1().PersistentVolumeClaims().Informer()
	})
	c.svcs = benchkit.NewObserver[*corev1.Service](ctx, t, watch, burstNS, func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
		return f.Core().V1().Services().Informer()
	})

	results := map[string][2]*result{}
	var all *result
	// write saves the report so far after every side, so that a side failing late (a cold
	// start past its timeout at L) does not lose the sides before it. The audit log is read
	// (idle requests, Lease renewals) only for the final report: at L it is gigabytes.
	write := func(final bool) {
		if final {
			countWindows(t, env)
		}
		out := report(sz, results, all)
		if !final {
			out = "**Partial**: written after each side; idle requests and Lease renewals are counted only when the run completes.\n\n" + out
		} else {
			fmt.Println(out)
		}
		if os.Getenv("SCALE_OUT") == "" {
			return
		}
		if err := os.MkdirAll(os.Getenv("SCALE_OUT"), 0o755); err != nil {
			t.Error(err)
		}
		if err := os.WriteFile(filepath.Join(os.Getenv("SCALE_OUT"), "results-"+sz.name+".md"), []byte(out), 0o644); err != nil {
			t.Error(err)
		}
		raw, _ := json.MarshalIndent(map[string]any{"size": sz.name, "partial": !final, "results": jsonResults(results, all)}, "", " ")
		_ = os.WriteFile(filepath.Join(os.Getenv("SCALE_OUT"), "results-"+sz.name+".json"), raw, 0o644)
	}
	for _, ctl := range controllers {
		if only != "" && !slices.Contains(strings.Split(only, ","), ctl.alias) {
			continue
		}
		var pair [2]*result
		pair[0] = c.runSide(ctx, t, ctl, false, []controller{ctl})
		results[ctl.alias] = pair
		write(false)
		if ctl.upstream != "" && !oursOnly {
			pair[1] = c.runSide(ctx, t, ctl, true, []controller{ctl})
			results[ctl.alias] = pair
			write(false)
		}
	}
	if only == "" || slices.Contains(strings.Split(only, ","), "all") {
		all = c.runSide(ctx, t, controller{alias: "all", upstream: "*"}, true, controllers)
	}
	write(true)
}

// settleTimeoutFor is settleTimeout, grown in proportion above 40,000 Pods.
func settleTimeoutFor(sz size) time.Duration {
	return max(settleTimeout, settleTimeout*time.Duration(sz.pods())/40000)
}

// auditAll records every request at Metadata level: idle reads are counted from it too.
const auditAll = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
`

func fastClient(t *testing.T, env *testenv.Env, role string) kubernetes.Interface {
	cfg := *env.Config
	cfg.QPS, cfg.Burst = 2000, 4000
	return benchkit.Client(t, &cfg, scaleUA+role)
}

// startKwok runs kwok for the Nodes annotated kwok.x-k8s.io/node=fake with only the Node
// stages: it renews their Leases as kubelets do, and leaves Pods alone (their status is
// written once by the harness and flipped by the churn).
func startKwok(t *testing.T, env *testenv.Env) {
	env.StartKwok(t, testenv.Kwok{Manage: "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake", LeaseSeconds: 40,
		Stages: []string{"node-initialize.yaml", "node-heartbeat-with-lease.yaml"}})
}

// ---- fixtures ----

// Over 80 lines: the fixture kinds in dependency order (Nodes before Pods, the ReplicaSets' UIDs into the Pods), all through the one progress-logging step.
func (c *cluster) createFixtures(ctx context.Context, t *testing.T) {
	sz := c.sz
	cl := c.client
	step := func(what string, n int, fn func(context.Context, int) error) {
		start := time.Now()
		var done atomic.Int64
		stop := make(chan struct{})
		go func() {
			tk := time.NewTicker(5 * time.Second)
			defer tk.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tk.C:
					c.logf("  %s: %d/%d", what, done.Load(), n)
				}
			}
		}()
		err := benchkit.Parallel(ctx, n, createWorkers, func(ctx context.Context, i int) error {
			err := fn(ctx, i)
			done.Add(1)
			return err
		})
		close(stop)
		if err != nil {
			t.Fatalf("creating %s: %v", what, err)
		}
		c.logf("created %d %s in %s", n, what, time.Since(start).Round(100*time.Millisecond))
	}
	step("namespaces", sz.namespaces, func(ctx context.Context, i int) error {
		name := otherNS(i - sz.appNamespaces())
		if i < sz.appNamespaces() {
			name = appNS(i)
		}
		_, err := cl.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"team": fmt.Sprintf("t%d", i%20), "env": "prod"}}}, metav1.CreateOptions{})
		return err
	})
	zones := []string{"zone-a", "zone-b", "zone-c"}
	step("kwok Nodes", sz.nodes, func(ctx context.Context, i int) error {
		n := benchkit.RealisticNode(fmt.Sprintf("node-%05d", i), zones[i%3])
		n.Annotations["kwok.x-k8s.io/node"] = "fake"
		status := n.Status
		created, err := cl.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		created.Status = status
		_, err = cl.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			err = nil // kwok initialized it first
		}
		return err
	})
	// Nodes whose Leases the harness renews, so that it can stop renewing them.
	c.renewer = newRenewer(cl, sz.failingNodes)
	step("failing-capable Nodes", sz.failingNodes, func(ctx context.Context, i int) error {
		n := benchkit.RealisticNode(failName(i), zones[i%3])
		status := n.Status
		created, err := cl.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		created.Status = status
		if _, err = cl.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			return err
		}
		return c.renewer.create(ctx, i, created)
	})
	go c.renewer.run(ctx)
	step("Services", sz.services, func(ctx context.Context, i int) error {
		_, err := cl.CoreV1().Services(appNS(i/servicesPerNS)).Create(ctx, benchkit.RealisticService(appNS(i/servicesPerNS), svcName(i)), metav1.CreateOptions{})
		return err
	})
	// Real owners, so that upstream's garbage collector (on in the every-controller run) keeps
	// the Pods; replicas match the Pods, so its ReplicaSet controller has nothing to do.
	rsUIDs := make([]types.UID, sz.services)
	step("ReplicaSets", sz.services, func(ctx context.Context, i int) error {
		rs := replicaSet(appNS(i/servicesPerNS), svcName(i), int32(sz.podsPerService))
		created, err := cl.AppsV1().ReplicaSets(rs.Namespace).Create(ctx, rs, metav1.CreateOptions{})
		if err == nil {
			rsUIDs[i] = created.UID
		}
		return err
	})
	c.pods = make([]podRef, sz.pods())
	step("Pods (create + kubelet status)", sz.pods(), func(ctx context.Context, i int) error {
		s := i / sz.podsPerService
		ref := podRef{ns: appNS(s / servicesPerNS), name: fmt.Sprintf("%s-%d", svcName(s), i%sz.podsPerService), svc: svcName(s), ip: fmt.Sprintf("10.%d.%d.%d", 64+i/65536, (i/256)%256, i%256)}
		c.pods[i] = ref
		p := benchkit.RealisticPod(ref.ns, ref.name, ref.svc, fmt.Sprintf("node-%05d", i%sz.nodes), ref.ip)
		p.OwnerReferences[0].Name, p.OwnerReferences[0].UID = ref.svc+"-"+p.Labels["pod-template-hash"], rsUIDs[s]
		status := p.Status
		created, err := cl.CoreV1().Pods(ref.ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		created.Status = status
		_, err = cl.CoreV1().Pods(ref.ns).UpdateStatus(ctx, created, metav1.UpdateOptions{})
		return err
	})
	step("ConfigMaps", sz.configMaps, func(ctx context.Context, i int) error {
		ns := i % sz.namespaces
		name := otherNS(ns - sz.appNamespaces())
		if ns < sz.appNamespaces() {
			name = appNS(ns)
		}
		_, err := cl.CoreV1().ConfigMaps(name).Create(ctx, benchkit.RealisticConfigMap(name, fmt.Sprintf("config-%05d", i)), metav1.CreateOptions{})
		return err
	})
	step("ResourceQuotas", sz.appNamespaces(), func(ctx context.Context, i int) error {
		q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: appNS(i), Name: "compute"}, Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{
			corev1.ResourcePods: resource.MustParse("10000"), corev1.ResourceServices: resource.MustParse("1000"), corev1.ResourceConfigMaps: resource.MustParse("10000"),
			corev1.ResourceRequestsCPU: resource.MustParse("1000"), corev1.ResourceRequestsMemory: resource.MustParse("4Ti"), corev1.ResourceLimitsMemory: resource.MustParse("8Ti"),
			corev1.ResourcePersistentVolumeClaims: resource.MustParse("1000"),
		}}}
		_, err := cl.CoreV1().ResourceQuotas(appNS(i)).Create(ctx, q, metav1.CreateOptions{})
		return err
	})
	immediate := storagev1.VolumeBindingImmediate
	if _, err := cl.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "standard"}, Provisioner: "kubernetes.io/no-provisioner", VolumeBindingMode: &immediate}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	step("bound PV/PVC pairs", sz.pvPairs, func(ctx context.Context, i int) error {
		ns := appNS(i % sz.appNamespaces())
		return createBoundPair(ctx, cl, ns, fmt.Sprintf("data-%05d", i))
	})
	installPoolCRD(ctx, t, c.env)
	benchkit.CreateNamespaces(ctx, t, cl, burstNS)
	if c.hotServices > 0 {
		c.createHot(ctx, t, step)
	}
}

func replicaSet(ns, app string, replicas int32) *appsv1.ReplicaSet {
	hash := benchkit.RealisticPod(ns, "x", app, "", "").Labels["pod-template-hash"]
	labels := map[string]string{"app": app, "pod-template-hash": hash}
	return &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: app + "-" + hash, Labels: labels},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example.com/shop/" + app + ":1.4.2"}}}},
		},
	}
}

func svcName(i int) string  { return fmt.Sprintf("svc-%05d", i) }
func failName(i int) string { return fmt.Sprintf("failing-%d", i) }

func pvSpec(name, class string, claim *corev1.ObjectReference) corev1.PersistentVolumeSpec {
	return corev1.PersistentVolumeSpec{
		Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")},
		AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
		StorageClassName:              class,
		ClaimRef:                      claim,
		PersistentVolumeSource:        corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "csi.example.com", VolumeHandle: "vol-" + name, FSType: "ext4"}},
	}
}

func pvcSpec(volume string) corev1.PersistentVolumeClaimSpec {
	class := "standard"
	return corev1.PersistentVolumeClaimSpec{
		AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")}},
		StorageClassName: &class,
		VolumeName:       volume,
	}
}

// createBoundPair creates a PVC and its PV as a binder leaves them: both Bound, each naming the other.
func createBoundPair(ctx context.Context, cl kubernetes.Interface, ns, name string) error {
	pvName := "pv-" + ns + "-" + name
	pvc, err := cl.CoreV1().PersistentVolumeClaims(ns).Create(ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "db"},
			Annotations: map[string]string{"pv.kubernetes.io/bind-completed": "yes", "pv.kubernetes.io/bound-by-controller": "yes"}},
		Spec: pvcSpec(pvName),
	}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	pv, err := cl.CoreV1().PersistentVolumes().Create(ctx, &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pvName, Annotations: map[string]string{"pv.kubernetes.io/bound-by-controller": "yes"}},
		Spec:       pvSpec(pvName, "standard", &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: ns, Name: name, UID: pvc.UID, ResourceVersion: pvc.ResourceVersion}),
	}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	pv.Status.Phase = corev1.VolumeBound
	if _, err := cl.CoreV1().PersistentVolumes().UpdateStatus(ctx, pv, metav1.UpdateOptions{}); err != nil {
		return err
	}
	pvc.Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound, AccessModes: pvc.Spec.AccessModes, Capacity: pv.Spec.Capacity}
	_, err = cl.CoreV1().PersistentVolumeClaims(ns).UpdateStatus(ctx, pvc, metav1.UpdateOptions{})
	return err
}

// ---- Node Leases the harness renews ----

type renewer struct {
	cl      kubernetes.Interface
	mu      sync.Mutex
	last    map[string]time.Time
	stopped map[string]bool
	n       int
}

func newRenewer(cl kubernetes.Interface, n int) *renewer {
	return &renewer{cl: cl, last: map[string]time.Time{}, stopped: map[string]bool{}, n: n}
}

func (r *renewer) create(ctx context.Context, i int, node *corev1.Node) error {
	dur := int32(40)
	now := metav1.NewMicroTime(time.Now())
	name := failName(i)
	_, err := r.cl.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(ctx, &coordv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: corev1.NamespaceNodeLease, OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: name, UID: node.UID}}},
		Spec:       coordv1.LeaseSpec{HolderIdentity: &name, LeaseDurationSeconds: &dur, RenewTime: &now},
	}, metav1.CreateOptions{})
	r.mu.Lock()
	r.last[name] = now.Time
	r.mu.Unlock()
	return err
}

func (r *renewer) run(ctx context.Context) {
	tk := time.NewTicker(2 * time.Second)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
		for i := range r.n {
			name := failName(i)
			r.mu.Lock()
			stopped := r.stopped[name]
			r.mu.Unlock()
			if stopped {
				continue
			}
			now := metav1.NewMicroTime(time.Now())
			patch := fmt.Sprintf(`{"spec":{"renewTime":%q}}`, now.Format(metav1.RFC3339Micro))
			if _, err := r.cl.CoordinationV1().Leases(corev1.NamespaceNodeLease).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err == nil {
				r.mu.Lock()
				r.last[name] = now.Time
				r.mu.Unlock()
			}
		}
	}
}

func (r *renewer) setStopped(stopped bool) map[string]time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]time.Time{}
	for i := range r.n {
		r.stopped[failName(i)] = stopped
		out[failName(i)] = r.last[failName(i)]
	}
	return out
}

func (r *renewer) lastRenewal(name string) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last[name]
}
