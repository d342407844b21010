// Package e2e installs the chart on the local control plane's real node, as an operator would,
// and checks what an operator relies on: Pods Ready, one Lease holder per controller, metrics
// behind the chart's metrics-reader role, the controllers doing their job, an upgrade that adds
// a controller, `helm test` passing and failing when it should, scaling, an upgrade of one
// controller alone, a leader Pod deleted, and an uninstall that leaves nothing of the release. `make chart-e2e` (deploy/tests/chart/e2e.sh) brings
// the cluster and the node up, runs this with KCM_SPLIT_CHART_E2E=1 and tears everything down.
// Timings are printed as FIGURE lines, never asserted.
package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authv1 "k8s.io/api/authentication/v1"
	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kcm-split/kcm-split/deploy/tests/chart"
	"github.com/kcm-split/kcm-split/shared/testenv"
	"github.com/kcm-split/kcm-split/shared/testenv/dataplane"
	"github.com/kcm-split/kcm-split/shared/testenv/handover"
)

const (
	enableEnv = "KCM_SPLIT_CHART_E2E"
	release   = "kcm-split"
	ns        = "kube-system"
	instance  = "app.kubernetes.io/instance=" + release
)

// config is what e2e.sh passes in.
type config struct {
	registry, tag, tag2 string // images: <registry>/<binary>:<tag>; tag2 the same images retagged
	node                string // the real node's name
	workload            string // an image whose container runs until stopped (agnhost or pause)
	workloadArgs        []string
	proxyMetrics        string // kube-proxy's metrics page on the node
}

type suite struct {
	t     *testing.T
	cfg   config
	cs    kubernetes.Interface
	chart *chart.Chart
	ctx   context.Context
}

// Over 80 lines: one release's life on a real node, install to uninstall, each step starting from the state (leaders, snapshots, tags) the last one left.
func TestChartE2E(t *testing.T) {
	if os.Getenv(enableEnv) != "1" {
		t.Skipf("chart end-to-end needs a real node: run `make chart-e2e` (root; it sets %s=1)", enableEnv)
	}
	s := newSuite(t, 25*time.Minute, true)
	cfg := s.cfg

	installed := false
	t.Cleanup(func() {
		if installed {
			// Best effort: a failed step still leaves the cluster without the release.
			_, _ = s.helmOut("uninstall", release, "-n", ns, "--wait", "--timeout", "2m")
		}
	})

	// --- install: endpoints + namespace, defaults except images and node placement ----------
	start := time.Now()
	s.helm("install", release, s.chart.Dir, "-n", ns,
		"--set", "controllers.endpoints.enabled=true",
		"--set", "controllers.namespace.enabled=true",
		"--set", "defaults.image.registry="+cfg.registry,
		"--set-string", "defaults.image.tag="+cfg.tag, // a commit hash can be all digits
		"--set", "defaults.nodeSelector.type=real")
	installed = true
	s.waitReady("endpoints-controller", 2, cfg.tag)
	s.waitReady("namespace-controller", 2, cfg.tag)
	epLeader := s.waitLeader("endpoints-controller")
	nsLeader := s.waitLeader("namespace-controller")
	figure(t, "install to Ready (2 controllers x 2 replicas, both Leases held)", time.Since(start))
	t.Logf("leaders: endpoints %s, namespace %s", epLeader, nsLeader)
	for _, c := range []string{"endpoints-controller", "namespace-controller"} {
		for _, p := range s.pods(c) {
			if p.Spec.NodeName != cfg.node {
				t.Fatalf("Pod %s runs on %q, want the real node %s", p.Name, p.Spec.NodeName, cfg.node)
			}
			pr := p.Spec.Containers[0].ReadinessProbe
			if pr == nil || pr.HTTPGet == nil || pr.HTTPGet.Scheme != corev1.URISchemeHTTPS {
				t.Fatalf("Pod %s: readiness probe is not HTTPS: %+v", p.Name, pr)
			}
		}
	}
	s.scrapeMetrics([]string{"endpoints-controller", "namespace-controller"})

	// --- the installed controllers do their job ------------------------------------------------
	s.endpointsOfRealPods()
	s.namespaceDeleted()

	// --- upgrade adds quota with --reuse-values: only the new Deployment appears -------------
	before := s.snapshot()
	s.helm("upgrade", release, s.chart.Dir, "-n", ns, "--reuse-values", "--set", "controllers.quota.enabled=true")
	s.waitReady("quota-controller", 2, cfg.tag)
	s.waitLeader("quota-controller")
	after := s.snapshot()
	for name, d := range before.deployments {
		if a := after.deployments[name]; a != d {
			t.Fatalf("Deployment %s changed by adding quota: %+v -> %+v", name, d, a)
		}
	}
	if n := len(after.deployments) - len(before.deployments); n != 1 || after.deployments["kcm-split-quota-controller"].uid == "" {
		t.Fatalf("adding quota: %d new Deployments (%v), want exactly kcm-split-quota-controller", n, keys(after.deployments))
	}
	samePods(t, before.pods, after.pods, "")
	s.quotaCounts()

	// --- helm test: each controller's /readyz through its Service and its Lease held ---------
	s.helmTest()

	// --- scale endpoints (2 is the default: out to 3, then to 2): standby Ready, PDB allows one
	s.helm("upgrade", release, s.chart.Dir, "-n", ns, "--reuse-values", "--set", "controllers.endpoints.replicas=3")
	s.waitReady("endpoints-controller", 3, cfg.tag)
	s.waitPDB("kcm-split-endpoints-controller", 1)
	s.helm("upgrade", release, s.chart.Dir, "-n", ns, "--reuse-values", "--set", "controllers.endpoints.replicas=2")
	s.waitReady("endpoints-controller", 2, cfg.tag)
	leader := s.waitLeader("endpoints-controller")
	standbys := 0
	for _, p := range s.pods("endpoints-controller") {
		if p.Name != leader && podReady(&p) {
			standbys++
		}
	}
	if standbys != 1 {
		t.Fatalf("endpoints-controller: %d Ready standbys beside leader %s, want 1", standbys, leader)
	}
	s.waitPDB("kcm-split-endpoints-controller", 1)

	// --- upgrade endpoints alone to a new tag: only its Deployment rolls ---------------------
	before = s.snapshot()
	oldLeader := s.waitLeader("endpoints-controller")
	s.keepLogs("endpoints-controller")
	lw := s.watchLease("endpoints-controller")
	start = time.Now()
	s.helm("upgrade", release, s.chart.Dir, "-n", ns, "--reuse-values", "--set-string", "controllers.endpoints.image.tag="+cfg.tag2)
	s.waitRolledOut("endpoints-controller", 2, cfg.tag2, before.podsOf("endpoints-controller"))
	newLeader := s.waitLeader("endpoints-controller")
	rollout := time.Since(start)
	_, _, gap := lw.until(t, oldLeader, newLeader)
	if !strings.Contains(s.podImage(newLeader), ":"+cfg.tag2) {
		t.Fatalf("Lease moved to %s, which does not run tag %s", newLeader, cfg.tag2)
	}
	after = s.snapshot()
	for name, d := range before.deployments {
		if name == "kcm-split-endpoints-controller" {
			continue
		}
		if a := after.deployments[name]; a != d {
			t.Fatalf("Deployment %s changed by upgrading endpoints alone: %+v -> %+v", name, d, a)
		}
	}
	samePods(t, before.pods, after.pods, "endpoints-controller")
	figure(t, "upgrade of endpoints alone, helm upgrade to rollout done", rollout)
	figure(t, "handover on upgrade: time without an endpoints leader", gap)

	// --- delete the leader Pod: takeover -------------------------------------------------------
	leader = s.waitLeader("endpoints-controller")
	lw = s.watchLease("endpoints-controller")
	s.keepLogs("endpoints-controller")
	// The Pods log json: their handover messages give the time without a writer.
	oldLog := handover.Follow(s.ctx, s.cs, ns, leader)
	var standbyLogs []*handover.PodLog
	for _, p := range s.pods("endpoints-controller") {
		if p.Name != leader {
			standbyLogs = append(standbyLogs, handover.Follow(s.ctx, s.cs, ns, p.Name))
		}
	}
	time.Sleep(time.Second) // the streams are open
	start = time.Now()
	if err := s.cs.CoreV1().Pods(ns).Delete(s.ctx, leader, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	seenAt, next, gap := lw.until(t, leader, "")
	t.Logf("Lease: %s -> %s", leader, next)
	figure(t, "takeover after the leader Pod was deleted: delete call to the new holder seen", seenAt.Sub(start))
	figure(t, "takeover after the leader Pod was deleted: time without a leader", gap)
	phases := handover.Collect(oldLog, standbyLogs, start, 30*time.Second)
	if d, ok := phases.WithoutWriter(); ok {
		figure(t, "takeover after the leader Pod was deleted: time without a writer (old leader fenced -> new leader synced)", d)
	}
	line := "FIGURE takeover after the leader Pod was deleted, phases: " + phases.String(start, "delete call")
	t.Log(line)
	fmt.Println(line)
	if l := s.waitLeader("endpoints-controller"); l == leader {
		t.Fatalf("the deleted Pod %s still holds the Lease", leader)
	}
	s.waitReady("endpoints-controller", 2, cfg.tag2)

	// --- uninstall: every object of the release is gone --------------------------------------
	manifest := s.helm("get", "manifest", release, "-n", ns)
	objs, err := chart.Decode(manifest)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"endpoints-controller", "namespace-controller", "quota-controller"} {
		s.keepLogs(c)
	}
	s.helm("uninstall", release, "-n", ns, "--wait", "--timeout", "3m")
	installed = false
	s.gone(objs)
	// What stays by design: the Leases, which the binaries create (not the chart). Nothing
	// renews them any more: each is released, or expires (helm deletes the Role that lets a
	// draining leader release its Lease together with the Deployment, so the release may be
	// refused).
	for _, c := range []string{"endpoints-controller", "namespace-controller", "quota-controller"} {
		var how string
		s.poll("Lease "+c+" kept, released or expired", time.Minute, func() (bool, error) {
			l, err := s.cs.CoordinationV1().Leases(ns).Get(s.ctx, c, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
				how = "released"
				return true, nil
			}
			if l.Spec.RenewTime != nil && l.Spec.LeaseDurationSeconds != nil &&
				time.Since(l.Spec.RenewTime.Time) > time.Duration(*l.Spec.LeaseDurationSeconds)*time.Second {
				how = "expired, still naming " + holderPod(*l.Spec.HolderIdentity)
				return true, nil
			}
			return false, fmt.Errorf("held by %s", *l.Spec.HolderIdentity)
		})
		t.Logf("after uninstall: Lease %s kept, %s", c, how)
	}
}

// helmTest runs `helm test --logs` on the three installed controllers: it must pass, name each
// controller's Lease holder and leave no test object behind. Then it must fail, naming the
// reasons, once the namespace controller is scaled to 0 (its Service has no endpoint, its Lease
// was released); scaled back, it passes again (removing the failed Pod).
func (s *suite) helmTest() {
	s.t.Helper()
	t := s.t
	controllers := []string{"endpoints-controller", "namespace-controller", "quota-controller"}
	start := time.Now()
	out := s.helm("test", release, "-n", ns, "--logs", "--timeout", "3m")
	figure(t, "helm test, 3 controllers (a test Pod each, run one after the other)", time.Since(start))
	for _, c := range controllers {
		want := fmt.Sprintf("%s check: OK: https://%s-%s.%s.svc:", c, release, c, ns)
		if !bytes.Contains(out, []byte(want)) || !bytes.Contains(out, []byte("Lease "+ns+"/"+c+" held by ")) {
			t.Fatalf("helm test: no %q and Lease holder for %s in:\n%s", want, c, out)
		}
	}
	t.Logf("helm test:\n%s", out)
	s.noTestObjects("after a passing helm test")

	// Scaled to 0: the namespace controller's test Pod fails, on /readyz and on the Lease.
	s.helm("upgrade", release, s.chart.Dir, "-n", ns, "--reuse-values", "--set", "controllers.namespace.replicas=0")
	s.poll("namespace-controller: no Pod left", 2*time.Minute, func() (bool, error) {
		if n := len(s.pods("namespace-controller")); n > 0 {
			return false, fmt.Errorf("%d Pods", n)
		}
		return true, nil
	})
	s.poll("Lease namespace-controller released or expired", time.Minute, func() (bool, error) {
		l, err := s.cs.CoordinationV1().Leases(ns).Get(s.ctx, "namespace-controller", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
			return true, nil
		}
		if l.Spec.RenewTime != nil && l.Spec.LeaseDurationSeconds != nil &&
			time.Since(l.Spec.RenewTime.Time) > time.Duration(*l.Spec.LeaseDurationSeconds+3)*time.Second {
			return true, nil
		}
		return false, fmt.Errorf("held by %s", *l.Spec.HolderIdentity)
	})
	start = time.Now()
	out, err := s.helmOut("test", release, "-n", ns, "--logs", "--timeout", "3m")
	failed := time.Since(start)
	if err == nil {
		t.Fatalf("helm test passed with the namespace controller scaled to 0:\n%s", out)
	}
	reason := "namespace-controller check: FAIL: GET https://" + release + "-namespace-controller." + ns + ".svc:"
	if !bytes.Contains(out, []byte(reason)) || !regexpLease.Match(out) {
		t.Fatalf("helm test failed, but not with %q and the Lease's reason:\n%s", reason, out)
	}
	figure(t, "helm test failing on a controller scaled to 0 (its check: 4 attempts, 7 s of backoff)", failed)
	t.Logf("helm test with namespace-controller scaled to 0 fails (%v):\n%s", err, out)

	s.helm("upgrade", release, s.chart.Dir, "-n", ns, "--reuse-values", "--set", "controllers.namespace.replicas=2")
	s.waitReady("namespace-controller", 2, s.cfg.tag)
	s.waitLeader("namespace-controller")
	s.helm("test", release, "-n", ns, "--logs", "--timeout", "3m")
	s.noTestObjects("after helm test passed again")
}

// regexpLease is the Lease part of the reason a check of a controller scaled to 0 gives.
var regexpLease = regexp.MustCompile(`lease ` + ns + `/namespace-controller (has no holder|held by \S+ expired)`)

// noTestObjects: no Pod, ServiceAccount, Role or RoleBinding of a helm test is left.
func (s *suite) noTestObjects(when string) {
	s.t.Helper()
	sel := instance + ",app.kubernetes.io/component in (endpoints-controller-test,namespace-controller-test,quota-controller-test)"
	s.poll("no helm test object left "+when, time.Minute, func() (bool, error) {
		var left []string
		pods, err := s.cs.CoreV1().Pods(ns).List(s.ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			left = append(left, "Pod/"+p.Name)
		}
		sas, err := s.cs.CoreV1().ServiceAccounts(ns).List(s.ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return false, err
		}
		for _, o := range sas.Items {
			left = append(left, "ServiceAccount/"+o.Name)
		}
		roles, err := s.cs.RbacV1().Roles(ns).List(s.ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return false, err
		}
		for _, o := range roles.Items {
			left = append(left, "Role/"+o.Name)
		}
		rbs, err := s.cs.RbacV1().RoleBindings(ns).List(s.ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return false, err
		}
		for _, o := range rbs.Items {
			left = append(left, "RoleBinding/"+o.Name)
		}
		if len(left) > 0 {
			return false, fmt.Errorf("left: %v", left)
		}
		return true, nil
	})
}

// keepLogs follows the logs of the controller's Pods into KCM_SPLIT_E2E_LOG_DIR (if set), so
// that what a leader did while it was replaced stays readable after its Pod is gone.
func (s *suite) keepLogs(binary string) {
	dir := os.Getenv("KCM_SPLIT_E2E_LOG_DIR")
	if dir == "" {
		return
	}
	for _, p := range s.pods(binary) {
		name := p.Name
		go func() {
			rc, err := s.cs.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{Follow: true}).Stream(s.ctx)
			if err != nil {
				return
			}
			defer rc.Close()
			f, err := os.OpenFile(filepath.Join(dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
			if err != nil {
				return
			}
			defer f.Close()
			_, _ = io.Copy(f, rc)
		}()
	}
}

// newSuite reads the environment chart-e2e.sh sets, builds the clients and finds the chart:
// the set-up every chart end-to-end test shares. tag2 says whether the test needs the second
// image tag (the upgrade step); the context ends after timeout or with the test.
func newSuite(t *testing.T, timeout time.Duration, tag2 bool) *suite {
	t.Helper()
	cfg := config{
		registry:     testenv.MustEnv(t, "KCM_SPLIT_E2E_IMAGE_REGISTRY", "make chart-e2e"),
		tag:          testenv.MustEnv(t, "KCM_SPLIT_E2E_IMAGE_TAG", "make chart-e2e"),
		node:         testenv.MustEnv(t, "KCM_SPLIT_E2E_NODE", "make chart-e2e"),
		workload:     testenv.MustEnv(t, "KCM_SPLIT_E2E_WORKLOAD_IMAGE", "make chart-e2e"),
		proxyMetrics: os.Getenv("KCM_SPLIT_E2E_PROXY_METRICS"),
	}
	if tag2 {
		cfg.tag2 = testenv.MustEnv(t, "KCM_SPLIT_E2E_IMAGE_TAG2", "make chart-e2e")
	}
	if a := os.Getenv("KCM_SPLIT_E2E_WORKLOAD_ARGS"); a != "" {
		cfg.workloadArgs = strings.Fields(a)
	}
	rc, err := clientcmd.BuildConfigFromFlags("", testenv.MustEnv(t, "KUBECONFIG", "make chart-e2e"))
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	c, err := chart.FindChart(os.Getenv("KCM_SPLIT_BIN_DIR"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	return &suite{t: t, cfg: cfg, cs: cs, chart: c, ctx: ctx}
}

func figure(t *testing.T, what string, d time.Duration) {
	t.Helper()
	line := fmt.Sprintf("FIGURE %s: %.2fs", what, d.Seconds())
	t.Log(line)
	fmt.Println(line)
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// helmOut runs bin/helm and returns its combined output.
func (s *suite) helmOut(args ...string) ([]byte, error) {
	cmd := exec.CommandContext(s.ctx, s.chart.Helm, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}

func (s *suite) helm(args ...string) []byte {
	s.t.Helper()
	out, err := s.helmOut(args...)
	if err != nil {
		s.t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func (s *suite) poll(what string, timeout time.Duration, cond func() (bool, error)) {
	s.t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(s.ctx, 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		ok, err := cond()
		if err != nil {
			last = err
			return false, nil
		}
		return ok, nil
	})
	if err != nil {
		s.t.Fatalf("%s: not within %s (last error: %v)", what, timeout, last)
	}
}

func (s *suite) pods(binary string) []corev1.Pod {
	s.t.Helper()
	l, err := s.cs.CoreV1().Pods(ns).List(s.ctx, metav1.ListOptions{LabelSelector: instance + ",app.kubernetes.io/component=" + binary})
	if err != nil {
		s.t.Fatal(err)
	}
	return l.Items
}

func podReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func (s *suite) podImage(name string) string {
	p, err := s.cs.CoreV1().Pods(ns).Get(s.ctx, name, metav1.GetOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	return p.Spec.Containers[0].Image
}

// waitReady waits until the controller has exactly n Pods, all Ready and running tag.
func (s *suite) waitReady(binary string, n int, tag string) {
	s.t.Helper()
	s.poll(fmt.Sprintf("%s: %d Ready Pods of tag %s", binary, n, tag), 3*time.Minute, func() (bool, error) {
		ps := s.pods(binary)
		if len(ps) != n {
			return false, fmt.Errorf("%d Pods", len(ps))
		}
		for i := range ps {
			if !podReady(&ps[i]) || !strings.HasSuffix(ps[i].Spec.Containers[0].Image, ":"+tag) {
				return false, fmt.Errorf("Pod %s (%s) not Ready", ps[i].Name, ps[i].Spec.Containers[0].Image)
			}
		}
		return true, nil
	})
}

// waitRolledOut waits until the controller's Pods are n new Ready Pods of tag, none of old.
func (s *suite) waitRolledOut(binary string, n int, tag string, old map[string]string) {
	s.t.Helper()
	s.waitReady(binary, n, tag)
	for _, p := range s.pods(binary) {
		if _, ok := old[p.Name]; ok {
			s.t.Fatalf("%s: Pod %s of before the upgrade still runs", binary, p.Name)
		}
	}
}

// holderPod is the Pod holding the Lease: identities are <hostname>_<uuid>, and a Pod's
// hostname is its name.
func holderPod(holder string) string {
	if i := strings.LastIndex(holder, "_"); i > 0 {
		return holder[:i]
	}
	return ""
}

// waitLeader waits until the controller's Lease is held by one of its Ready Pods; returns it.
func (s *suite) waitLeader(binary string) string {
	s.t.Helper()
	var leader string
	s.poll("Lease "+ns+"/"+binary+" held by one of its Pods", 2*time.Minute, func() (bool, error) {
		l, err := s.cs.CoordinationV1().Leases(ns).Get(s.ctx, binary, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		h := ""
		if l.Spec.HolderIdentity != nil {
			h = holderPod(*l.Spec.HolderIdentity)
		}
		for _, p := range s.pods(binary) {
			if p.Name == h && podReady(&p) {
				leader = h
				return true, nil
			}
		}
		return false, fmt.Errorf("holder %q is none of the Ready Pods", h)
	})
	return leader
}

type depState struct {
	uid        string
	generation int64
}

type state struct {
	deployments map[string]depState
	pods        map[string]string // Pod name -> component
}

func (st state) podsOf(binary string) map[string]string {
	out := map[string]string{}
	for p, c := range st.pods {
		if c == binary {
			out[p] = c
		}
	}
	return out
}

func (s *suite) snapshot() state {
	s.t.Helper()
	st := state{deployments: map[string]depState{}, pods: map[string]string{}}
	ds, err := s.cs.AppsV1().Deployments(ns).List(s.ctx, metav1.ListOptions{LabelSelector: instance})
	if err != nil {
		s.t.Fatal(err)
	}
	for _, d := range ds.Items {
		st.deployments[d.Name] = depState{uid: string(d.UID), generation: d.Generation}
	}
	ps, err := s.cs.CoreV1().Pods(ns).List(s.ctx, metav1.ListOptions{LabelSelector: instance})
	if err != nil {
		s.t.Fatal(err)
	}
	for _, p := range ps.Items {
		st.pods[p.Name+"/"+string(p.UID)] = p.Labels["app.kubernetes.io/component"]
	}
	return st
}

// samePods: every Pod of before (except the component rolled) still runs with the same UID.
func samePods(t *testing.T, before, after map[string]string, rolled string) {
	t.Helper()
	for p, c := range before {
		if c == rolled {
			continue
		}
		if _, ok := after[p]; !ok {
			t.Fatalf("Pod %s (%s) was replaced; only %q should have rolled", p, c, rolled)
		}
	}
}

// scrapeMetrics: a ServiceAccount bound to the chart's metrics-reader ClusterRole gets every
// replica's /metrics over HTTPS (on the Pod IP); without a token the answer is 401.
func (s *suite) scrapeMetrics(binaries []string) {
	s.t.Helper()
	t := s.t
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "e2e-scraper", Namespace: "default"}}
	if _, err := s.cs.CoreV1().ServiceAccounts("default").Create(s.ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-scraper"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: release + "-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "e2e-scraper", Namespace: "default"}},
	}
	if _, err := s.cs.RbacV1().ClusterRoleBindings().Create(s.ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_ = s.cs.RbacV1().ClusterRoleBindings().Delete(ctx, "e2e-scraper", metav1.DeleteOptions{})
		_ = s.cs.CoreV1().ServiceAccounts("default").Delete(ctx, "e2e-scraper", metav1.DeleteOptions{})
	})
	tr, err := s.cs.CoreV1().ServiceAccounts("default").CreateToken(s.ctx, "e2e-scraper", &authv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		// The replicas serve self-signed certificates (the chart's default).
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // self-signed by design
	}}
	get := func(url, token string) (int, string, error) {
		req, err := http.NewRequestWithContext(s.ctx, http.MethodGet, url, nil)
		if err != nil {
			return 0, "", err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), err
	}
	for _, b := range binaries {
		for _, p := range s.pods(b) {
			url := fmt.Sprintf("https://%s:%d/metrics", p.Status.PodIP, p.Spec.Containers[0].Ports[0].ContainerPort)
			if code, _, err := get(url, ""); err != nil || code != http.StatusUnauthorized {
				t.Fatalf("%s without a token: %d %v, want 401", url, code, err)
			}
			var body string
			// The SubjectAccessReview of a new binding may take a moment to allow.
			s.poll(url+" with the metrics-reader token", time.Minute, func() (bool, error) {
				code, b, err := get(url, tr.Status.Token)
				if err != nil {
					return false, err
				}
				if code != http.StatusOK {
					return false, fmt.Errorf("status %d", code)
				}
				body = b
				return true, nil
			})
			if !strings.Contains(body, "leader_election_master_status") {
				t.Fatalf("%s: no leader_election_master_status in the metrics", url)
			}
			t.Logf("scraped %s (%s): %d bytes", url, p.Name, len(body))
		}
	}
}

// endpointsOfRealPods: a Deployment of real Pods on the node behind a Service gets Endpoints
// (and EndpointSlices) listing exactly its Pods, written while only the chart's endpoints
// controller runs.
// Over 80 lines: one chain on the real node: the Pods' IPs found first are what the Endpoints, the slices and the ClusterIP request are checked against.
func (s *suite) endpointsOfRealPods() {
	s.t.Helper()
	t := s.t
	const wns = "e2e-web"
	s.createNS(wns)
	labels := map[string]string{"app": "web"}
	replicas := int32(2)
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: wns},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
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
	if _, err := s.cs.AppsV1().Deployments(wns).Create(s.ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: wns},
		Spec:       corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
	if _, err := s.cs.CoreV1().Services(wns).Create(s.ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var podIPs []string
	s.poll("2 Ready Pods of e2e-web/web on the real node", 2*time.Minute, func() (bool, error) {
		ps, err := s.cs.CoreV1().Pods(wns).List(s.ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return false, err
		}
		podIPs = nil
		for i := range ps.Items {
			p := &ps.Items[i]
			if p.Spec.NodeName != s.cfg.node || !podReady(p) {
				return false, fmt.Errorf("Pod %s on %q phase %s", p.Name, p.Spec.NodeName, p.Status.Phase)
			}
			podIPs = append(podIPs, p.Status.PodIP)
		}
		return len(podIPs) == 2, nil
	})
	sort.Strings(podIPs)
	s.poll("Endpoints e2e-web/web list the 2 Pods' IPs", time.Minute, func() (bool, error) {
		ep, err := s.cs.CoreV1().Endpoints(wns).Get(s.ctx, "web", metav1.GetOptions{}) //nolint:staticcheck // the v1 Endpoints are what the endpoints controller writes
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
		return true, nil
	})
	s.poll("EndpointSlices of e2e-web/web list the 2 Pods ready", time.Minute, func() (bool, error) {
		l, err := s.cs.DiscoveryV1().EndpointSlices(wns).List(s.ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=web"})
		if err != nil {
			return false, err
		}
		var ips []string
		for _, sl := range l.Items {
			for _, e := range sl.Endpoints {
				if e.Conditions.Ready != nil && *e.Conditions.Ready {
					ips = append(ips, e.Addresses...)
				}
			}
		}
		sort.Strings(ips)
		if strings.Join(ips, ",") != strings.Join(podIPs, ",") {
			return false, fmt.Errorf("slices %v, Pods %v", ips, podIPs)
		}
		return true, nil
	})
	slicesListed := time.Now()
	t.Logf("e2e-web/web: Endpoints and EndpointSlices list the real Pods %v", podIPs)
	if len(s.cfg.workloadArgs) == 0 {
		return
	}
	// agnhost netexec answers /hostname: through kube-proxy, the ClusterIP reaches the Pods.
	got, err := s.cs.CoreV1().Services(wns).Get(s.ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.waitDataPath(got.Spec.ClusterIP, got.Spec.Ports[0].Port, podIPs, 8080, slicesListed)
	url := "http://" + got.Spec.ClusterIP + "/hostname"
	// Every try a new connection: one made before a rule existed must not be reused after.
	client := dataplane.Client(3 * time.Second)
	s.poll("GET "+url+" answered by a Pod", time.Minute, func() (bool, error) {
		resp, err := client.Get(url)
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK || !strings.HasPrefix(string(b), "web-") {
			// Without a kube-proxy rule the request leaves by the default route, where this
			// machine's egress proxy answers 404 with no body: say which it was.
			return false, fmt.Errorf("%d %q %v (%s)", resp.StatusCode, b, err, kubeProxyRule(got.Spec.ClusterIP))
		}
		t.Logf("GET %s: %s", url, b)
		return true, nil
	})
}

// waitDataPath: before anything is sent to ip:port, the route to it stays on the machine and
// kube-proxy sends it to exactly the Pods (podIPs, targetPort). Prints how long the node took to
// program it after since, and kube-proxy's own sync and programming latencies.
func (s *suite) waitDataPath(ip string, port int32, podIPs []string, targetPort int, since time.Time) {
	s.t.Helper()
	t := s.t
	route, err := dataplane.CheckRoute("", ip)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("route to %s: %s", ip, route)
	want := make([]string, len(podIPs))
	for i, p := range podIPs {
		want[i] = net.JoinHostPort(p, strconv.Itoa(targetPort))
	}
	if _, err := dataplane.WaitProgrammed(s.ctx, ip, port, want, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	figure(t, fmt.Sprintf("kube-proxy programmed %s:%d (from the EndpointSlices listing the Pods)", ip, port), time.Since(since))
	if s.cfg.proxyMetrics == "" {
		return
	}
	if l, err := dataplane.ProxyLatency(s.ctx, s.cfg.proxyMetrics); err != nil {
		t.Logf("kube-proxy's metrics: %v", err)
	} else {
		t.Log("FIGURE kube-proxy: " + l)
		fmt.Println("FIGURE kube-proxy: " + l)
	}
}

func ptr[T any](v T) *T { return &v }

// kubeProxyRule says whether the node's nat table holds a rule for ip, for a failure message.
func kubeProxyRule(ip string) string {
	out, err := exec.Command("iptables-save", "-t", "nat").CombinedOutput()
	if err != nil {
		return fmt.Sprintf("iptables-save: %v", err)
	}
	n := 0
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, ip+"/32") {
			n++
		}
	}
	if n == 0 {
		return "no kube-proxy rule for " + ip + " in the nat table"
	}
	return fmt.Sprintf("%d nat rules name %s", n, ip)
}

func (s *suite) createNS(name string) {
	s.t.Helper()
	if _, err := s.cs.CoreV1().Namespaces().Create(s.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		s.t.Fatal(err)
	}
}

// namespaceDeleted: a namespace holding ConfigMaps, a Secret, a Service and a ServiceAccount
// is emptied and removed once deleted (the chart's namespace controller is the only one).
func (s *suite) namespaceDeleted() {
	s.t.Helper()
	t := s.t
	const dns = "e2e-doomed"
	s.createNS(dns)
	for i := 0; i < 5; i++ {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i), Namespace: dns}, Data: map[string]string{"k": "v"}}
		if _, err := s.cs.CoreV1().ConfigMaps(dns).Create(s.ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.cs.CoreV1().Secrets(dns).Create(s.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: dns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "svc", Namespace: dns}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
	if _, err := s.cs.CoreV1().Services(dns).Create(s.ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := s.cs.CoreV1().Namespaces().Delete(s.ctx, dns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s.poll("namespace "+dns+" deleted by the namespace controller", 2*time.Minute, func() (bool, error) {
		_, err := s.cs.CoreV1().Namespaces().Get(s.ctx, dns, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	t.Logf("namespace %s with 8 objects deleted in %.1fs", dns, time.Since(start).Seconds())
}

// quotaCounts: the chart's quota controller fills in a new ResourceQuota's usage.
func (s *suite) quotaCounts() {
	s.t.Helper()
	q := &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e", Namespace: "e2e-web"},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"pods": resource.MustParse("10"), "services": resource.MustParse("5")}},
	}
	if _, err := s.cs.CoreV1().ResourceQuotas("e2e-web").Create(s.ctx, q, metav1.CreateOptions{}); err != nil {
		s.t.Fatal(err)
	}
	s.poll("ResourceQuota e2e-web/e2e counts 2 Pods and 1 Service", time.Minute, func() (bool, error) {
		q, err := s.cs.CoreV1().ResourceQuotas("e2e-web").Get(s.ctx, "e2e", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		p, sv := q.Status.Used["pods"], q.Status.Used["services"]
		if p.Value() != 2 || sv.Value() != 1 {
			return false, fmt.Errorf("used %v", q.Status.Used)
		}
		return true, nil
	})
}

func (s *suite) waitPDB(name string, allowed int32) {
	s.t.Helper()
	s.poll(fmt.Sprintf("PodDisruptionBudget %s allows %d disruption", name, allowed), time.Minute, func() (bool, error) {
		p, err := s.cs.PolicyV1().PodDisruptionBudgets(ns).Get(s.ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if p.Status.DisruptionsAllowed != allowed {
			return false, fmt.Errorf("disruptionsAllowed %d", p.Status.DisruptionsAllowed)
		}
		return true, nil
	})
}

// leaseWatch records the records a Lease goes through, with the local time each was seen.
type leaseWatch struct {
	ch <-chan seen
}

type seen struct {
	holder         string // the holder Pod, "" when released
	renew, acquire time.Time
	at             time.Time // when the watch delivered it
}

func (s *suite) watchLease(name string) *leaseWatch {
	s.t.Helper()
	w, err := s.cs.CoordinationV1().Leases(ns).Watch(s.ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		s.t.Fatal(err)
	}
	ch := make(chan seen, 1000)
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			if ev.Type != watch.Added && ev.Type != watch.Modified {
				continue
			}
			l, ok := ev.Object.(*coordv1.Lease)
			if !ok {
				continue
			}
			e := seen{at: time.Now()}
			if l.Spec.HolderIdentity != nil {
				e.holder = holderPod(*l.Spec.HolderIdentity)
			}
			if l.Spec.RenewTime != nil {
				e.renew = l.Spec.RenewTime.Time
			}
			if l.Spec.AcquireTime != nil {
				e.acquire = l.Spec.AcquireTime.Time
			}
			ch <- e
		}
	}()
	s.t.Cleanup(w.Stop)
	return &leaseWatch{ch: ch}
}

// until follows the Lease from holder old until it is held by target (any other Pod when
// target is empty). It returns when that holder was first seen (local clock), who it is, and
// the time the controller had no leader on the way: for every change of holder, the new
// holder's acquireTime minus the previous record's renewTime (the old leader's last renewal,
// or its release, which client-go stamps), both written by the apiserver's clients on this
// machine, so intermediate holders are counted too.
func (lw *leaseWatch) until(t *testing.T, old, target string) (time.Time, string, time.Duration) {
	t.Helper()
	var prev *seen
	var leaderless time.Duration
	timeout := time.After(2 * time.Minute)
	for {
		select {
		case e := <-lw.ch:
			if prev != nil && e.holder != prev.holder && e.holder != "" && !e.acquire.IsZero() && !prev.renew.IsZero() {
				leaderless += e.acquire.Sub(prev.renew)
			}
			if e.holder != "" && e.holder != old && (target == "" || e.holder == target) {
				return e.at, e.holder, leaderless
			}
			prev = &e
		case <-timeout:
			t.Fatalf("the Lease did not move from %s to %q within 2m", old, target)
		}
	}
}

// gone: every object the release had is NotFound after the uninstall.
func (s *suite) gone(objs []chart.Object) {
	s.t.Helper()
	kubectl := filepath.Join(filepath.Dir(s.chart.Helm), "kubectl")
	var left []string
	s.poll("every object of the release gone", 2*time.Minute, func() (bool, error) {
		left = nil
		for _, o := range objs {
			args := []string{"get", o.Kind + "/" + o.Name, "--ignore-not-found", "-o", "name"}
			if o.Namespace != "" {
				args = append(args, "-n", o.Namespace)
			} else if nsScoped(o.Kind) {
				args = append(args, "-n", ns)
			}
			out, err := exec.CommandContext(s.ctx, kubectl, args...).CombinedOutput()
			if err != nil {
				return false, fmt.Errorf("kubectl %v: %v: %s", args, err, out)
			}
			if len(bytes.TrimSpace(out)) > 0 {
				left = append(left, o.Kind+"/"+o.Name)
			}
		}
		ps, err := s.cs.CoreV1().Pods(ns).List(s.ctx, metav1.ListOptions{LabelSelector: instance})
		if err != nil {
			return false, err
		}
		for _, p := range ps.Items {
			left = append(left, "Pod/"+p.Name)
		}
		if len(left) > 0 {
			return false, fmt.Errorf("left: %v", left)
		}
		return true, nil
	})
	s.t.Logf("uninstall: all %d objects of the release and its Pods are gone", len(objs))
}

func nsScoped(kind string) bool {
	switch kind {
	case "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "Namespace", "PriorityClass":
		return false
	}
	return true
}
