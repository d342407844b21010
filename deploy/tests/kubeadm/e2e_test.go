package kubeadm

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/kcm-split/kcm-split/deploy/tests/drills/churn"
	"github.com/kcm-split/kcm-split/deploy/tests/drills/handover"
	"github.com/kcm-split/kcm-split/shared/testenv"
)

const (
	enableEnv = "KCM_SPLIT_KUBEADM_E2E"
	// The runbook's settings, as the e2e gives them (the chart's README sets the same names).
	namespace = "kube-system"
	release   = "kcm-split"
	// controllers: every binary; servicelb is named, as `all` leaves it out.
	controllers  = "all,servicelb"
	manifest     = "/etc/kubernetes/manifests/kube-controller-manager.yaml"
	manifestsDir = "/etc/kubernetes/manifests"
	auditLog     = "/var/log/kubernetes/audit/audit.log"
	kcmLease     = "kube-controller-manager"
	kubeadmVer   = "v1.36.3"
	// zone keeps the churn's fake Nodes' health apart from the real Node's.
	zone = "kcm-split-kubeadm-e2e"
)

// The binaries the chart runs here, by their IDs (the take-over log lines' logger names).
var binaries = []string{"endpoints-controller", "namespace-controller", "nodelifecycle-controller",
	"pv-binder-controller", "quota-controller", "service-lb-controller"}

// carriedTo is the binary (chart key) each KCM flag the e2e sets on KCM (KA_KCM_ARGS, set
// through kubeadm's ClusterConfiguration by deploy/kubeadm/up.sh) must be carried to by
// kcm-split-plan.
var carriedTo = map[string]string{
	"node-monitor-grace-period":  "nodelifecycle",
	"node-monitor-period":        "nodelifecycle",
	"pvclaimbinder-sync-period":  "pvbinder",
	"concurrent-namespace-syncs": "namespace",
	"concurrent-endpoint-syncs":  "endpoints",
	"resource-quota-sync-period": "quota",
}

// e2e is one run's state.
type e2e struct {
	t      *testing.T
	ctx    context.Context
	root   string
	work   string
	env    []string
	rb     *Runbook
	client kubernetes.Interface
	dyn    dynamic.Interface
	leases *LeaseLog
	began  time.Time
}

func (e *e2e) logf(format string, args ...any) {
	e.t.Helper()
	e.t.Logf("%7.1fs "+format, append([]any{time.Since(e.began).Seconds()}, args...)...)
}

// block runs a runbook block after the helpers and logs its output; a failing block fails the
// test.
func (e *e2e) block(id string) string {
	e.t.Helper()
	start := time.Now()
	out, err := e.rb.Run(e.ctx, e.work, e.env, id, "helpers")
	e.logf("runbook %s (%.1fs):\n%s", id, time.Since(start).Seconds(), indent(out))
	if err != nil {
		e.t.Fatalf("%v", err)
	}
	return out
}

// render runs a command that writes KCM's manifest and returns the manifest's modification
// time: when the kubelet can first see the change.
func (e *e2e) render(run func()) time.Time {
	e.t.Helper()
	run()
	fi, err := os.Stat(manifest)
	if err != nil {
		e.t.Fatal(err)
	}
	e.logf("KCM's manifest written at %s", fi.ModTime().Format(time.StampMilli))
	return fi.ModTime()
}

// command runs a program outside the runbook (the test's own actions), its output in file.
func (e *e2e) command(file string, name string, args ...string) {
	e.t.Helper()
	cmd := exec.CommandContext(e.ctx, name, args...)
	cmd.Dir = e.work
	cmd.Env = append(os.Environ(), e.env...)
	out, err := cmd.CombinedOutput()
	if werr := os.WriteFile(filepath.Join(e.work, file), out, 0o644); werr != nil {
		e.t.Fatal(werr)
	}
	if err != nil {
		e.t.Fatalf("%s %s: %v:\n%s", name, strings.Join(args, " "), err, out)
	}
}

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return "    (no output)"
	}
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}

// TestKubeadmE2E is `make kubeadm-e2e` (deploy/tests/kubeadm/e2e.sh starts the cluster):
// the runbook's steps run as written, under churn, then every figure and invariant.
// Over 80 lines: the runbook's steps in order, each with what it measures, read as one story.
func TestKubeadmE2E(t *testing.T) {
	if os.Getenv(enableEnv) != "1" {
		t.Skipf("needs the kubeadm cluster of deploy/kubeadm and root: run `make kubeadm-e2e` (it sets %s=1)", enableEnv)
	}
	e := setup(t)
	ctx := e.ctx
	effectTimeout := 3 * time.Minute
	grace := kcmArgDuration(t, "node-monitor-grace-period", 50*time.Second)

	// Step 0: the plan, and the original ClusterConfiguration kept.
	e.block("step-0")
	checkCarried(t, filepath.Join(e.work, "values.yaml"))
	if err := os.WriteFile(filepath.Join(e.work, "site-values.yaml"), siteValues(t, e.hostNodes()), 0o644); err != nil {
		t.Fatal(err)
	}

	// The churn of the five controllers KCM hands over, from before the chart is installed.
	ch, err := churn.New(churn.Config{Client: e.client, Prefix: "kae2e", NodeGrace: grace, NodeZone: zone, EffectTimeout: effectTimeout,
		KubeletVersion: kubeadmVer, // kubeadm upgrade reads every Node's
		Controllers:    []string{churn.Endpoints, churn.NodeLifecycle, churn.Quota, churn.Namespace, churn.PVBinder},
		Logf:           func(f string, a ...any) { e.logf(f, a...) }})
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ch.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	phases := ch.Phases(effectTimeout+time.Minute, e.logf)
	phase := func(name string, body func()) churn.Window { t.Helper(); return phases.Run(ctx, t, name, body) }
	phase("steady, KCM alone", func() { time.Sleep(10 * time.Second) })

	// Step 1: the chart with the take-over: every binary waits and writes nothing.
	var lb *churn.Churn
	var prom *prometheus
	phase("1: chart installed, binaries waiting", func() {
		e.block("step-1")
		checkDeployments(t, e)
		prom = e.startPrometheus()
		// servicelb's churn: KCM never runs service-lb, so its changes are made only while our
		// binary runs it. The address pool's CRD came with the chart.
		lb, err = churn.New(churn.Config{Client: e.client, Dynamic: e.dyn, Prefix: "kae2elb", EffectTimeout: effectTimeout,
			Controllers: []string{churn.ServiceLB}, Logf: func(f string, a ...any) { e.logf(f, a...) }})
		if err != nil {
			t.Fatal(err)
		}
		if err := lb.Setup(ctx); err != nil {
			t.Fatal(err)
		}
	})
	defer lb.Close()

	// Steps 2 and 3: the ClusterConfiguration with the controllers off, KCM rendered from it.
	var tTakeOver time.Time
	takeOver := phase("2-3: take-over", func() {
		e.block("step-2")
		tTakeOver = e.render(func() { e.block("step-3-node") })
		e.block("step-3-check")
	})
	if err := lb.Start(ctx); err != nil {
		t.Fatal(err)
	}

	// Step 4: kubeadm upgrade apply at the same version: nothing may change.
	var before, after map[string]string
	var kcmBefore, kcmAfter podID
	upgrade := phase("4: kubeadm upgrade apply "+kubeadmVer, func() {
		before, kcmBefore = manifestHashes(t), e.kcmPod()
		e.command("kubeadm-upgrade.log", "kubeadm", "upgrade", "apply", kubeadmVer, "-y",
			"--ignore-preflight-errors=SystemVerification") // cgroup v1 here
		after, kcmAfter = manifestHashes(t), e.kcmPod()
		e.block("step-4")
	})

	// KCM's container killed and restarted by the kubelet, its controllers still off: a crash, a
	// lost leader election (KCM exits), or what a kubeadm upgrade to a new version does to its
	// Pod. Measured, not asserted: the binaries may stand down until KCM's Lease changes hands.
	var tRestart time.Time
	restart := phase("4b: KCM restarted, its controllers still off", func() {
		before := e.kcmPod()
		tRestart = time.Now()
		e.command("kcm-kill.log", "ctr", "--address", testenv.MustEnv(t, "KCM_SPLIT_KUBEADM_E2E_CONTAINERD", "deploy/tests/kubeadm/e2e.sh"), "-n", "k8s.io",
			"task", "kill", "-s", "KILL", before.container)
		e.waitKCMRestarted(before)
		time.Sleep(5 * time.Second) // the binaries' verdict on the new process, if any
		e.block("step-4")
	})

	// The trap: KCM rendered from the original ClusterConfiguration.
	lb.Pause(churn.ServiceLB)
	var tTrap time.Time
	trap := phase("5: the trap (KCM rendered from the original file)", func() {
		tTrap = e.render(func() {
			e.command("trap.log", "kubeadm", "init", "phase", "control-plane", "controller-manager",
				"--config", filepath.Join(e.work, "cluster-original.yaml"))
		})
		e.block("step-5")
		e.waitKCMLeads(tTrap)
		// The trap pages: the critical alert fires for every binary before the fix.
		e.waitFiring(prom, "KcmSplitKubeControllerManagerRunsAgain", 5*time.Minute)
	})

	// The runbook's fix: steps 2 and 3 again.
	var tFix time.Time
	fix := phase("5: the fix (steps 2-3 again)", func() {
		e.block("step-2")
		tFix = e.render(func() { e.block("step-3-node") })
		e.block("step-3-check")
	})
	lb.Resume(churn.ServiceLB)

	// Step 6: rollback. servicelb's churn stops first: KCM runs no service-lb controller.
	lbRep := lb.Stop(ctx)
	var tRollback time.Time
	rollback := phase("6: rollback", func() {
		e.block("step-6")
		// Step 6 left the trap's alert out of the release: Prometheus loads the rules anew.
		e.reloadRules(prom)
		tRollback = e.render(func() { e.block("step-3-node") })
		e.block("step-6-check")
		e.waitKCMLeads(tRollback)
	})
	phase("steady, KCM alone again", func() { time.Sleep(10 * time.Second) })
	rep := ch.Stop(ctx)
	events := e.takeOverEvents()
	// The chart's alert rules leave with the release: an operator's Prometheus evaluates none
	// of them after the uninstall, whose scrape targets vanish (this one's stay configured).
	uninstalled := time.Now()
	e.block("step-6-uninstall")

	// --- Figures and invariants.
	for _, l := range strings.Split(strings.TrimRight(rep.String()+lbRep.String(), "\n"), "\n") {
		e.logf("%s", l)
	}
	lost := rep.Lost() + lbRep.Lost()
	if lost != 0 {
		t.Errorf("lost work: %d (see the churn lines above)", lost)
	}
	if thin := append(rep.Thin(3), lbRep.Thin(3)...); len(thin) > 0 {
		t.Errorf("the churn did not exercise %v: \"0 lost\" proves nothing for them", thin)
	}
	for _, l := range ch.GapTable(phases.Windows) {
		e.logf("%s", l)
	}
	for _, l := range ch.SlowChanges([]churn.Window{takeOver, trap, fix, rollback}, 5*time.Second) {
		e.logf("%s", l)
	}
	e.logf("take-over (steps 2-3), time from KCM's manifest to each binary's \"starting them\": %s", since(events, tTakeOver, upgrade.Start, true))
	e.logf("the fix, time from KCM's manifest to each binary's \"starting them\": %s", since(events, tFix, time.Now(), true))
	e.logf("rollback, time from KCM's manifest to each binary's \"stopping them\": %s", since(events, tRollback, time.Now(), false))
	e.logf("KCM restarted (controllers off): %s", lapses(events, tRestart, restart.End))

	// The upgrade kept everything: the manifests as they were, KCM's Pod the same, no binary
	// stopped.
	kept := maps.Equal(before, after) && kcmBefore.uid == kcmAfter.uid && kcmBefore.started == kcmAfter.started && len(between(events, upgrade.Start, upgrade.End)) == 0
	if !kept {
		t.Errorf("kubeadm upgrade apply changed something: manifests %v -> %v; KCM Pod %v -> %v; take-over events during it %v",
			before, after, kcmBefore, kcmAfter, between(events, upgrade.Start, upgrade.End))
	}

	// Who wrote what.
	evs, err := testenv.ReadAuditFiles[testenv.AuditEvent](auditLog)
	if err != nil {
		t.Fatal(err)
	}
	evs = testenv.Filter(evs, testenv.ReceivedAfter(e.began), persists)
	kcmSide := handover.KCMByServiceAccount(handover.KCMClients...)
	ourSide := handover.KcmSplitWrites(handover.KcmSplitIDs...)
	kcmTerms := e.leases.KCMTerms()
	ourTerms := OurTerms(events)
	for _, h := range kcmTerms {
		e.logf("KCM term %s %s", h.ID, h.Term)
	}
	for _, pod := range slices.Sorted(maps.Keys(ourTerms)) {
		e.logf("kcm-split terms %s %v", pod, ourTerms[pod])
	}
	res := handover.TwoWriters(evs,
		handover.Side{Name: "KCM", Writes: kcmSide, Terms: termsOf(kcmTerms)},
		handover.Side{Name: "kcm-split", Writes: ourSide, Terms: slices.Concat(slices.Collect(maps.Values(ourTerms))...)})
	e.logf("audit: %d events; objects written by KCM's replaced controllers and kcm-split in overlapping terms: %d %v",
		len(evs), len(res.TwoWriters), res.Examples(5))
	if len(res.TwoWriters) != 0 {
		t.Errorf("two writers: %v", res.Examples(-1))
	}
	if n := len(res.OutOfTermA); n != 0 {
		t.Errorf("%d writes by KCM's replaced controllers outside every KCM leader's term, e.g. %s", n, describe(res.OutOfTermA[0]))
	}
	if n := len(res.OutOfTermB); n != 0 {
		t.Errorf("%d writes by kcm-split's controllers outside their terms, e.g. %s", n, describe(res.OutOfTermB[0]))
	}

	// The trap: every binary stood down before KCM's first write as a replaced controller.
	standDown := stoodDown(t, e, evs, events, "the trap", tTrap, fix.Start, kcmSide, ourSide)
	stoodDown(t, e, evs, events, "rollback", tRollback, time.Now(), kcmSide, ourSide)

	falseCritical := e.alerts(prom, uninstalled, tTrap, fix.End)
	if falseCritical != 0 {
		t.Errorf("%d critical alerts pending or firing outside the trap (a planned step would page someone): see the log above", falseCritical)
	}

	gapMax := func(w churn.Window) float64 { return ch.GapMax(w).Seconds() }
	e.logf("run %s", time.Since(e.began).Round(time.Second))
	keptWord := map[bool]string{true: "yes", false: "no"}[kept]
	fmt.Printf("kubeadm-e2e: takeover_gap_max_s=%.1f two_writers=%d lost=%d upgrade_kept=%s restored_standdown_max_s=%.1f rollback_gap_max_s=%.1f false_critical=%d\n",
		gapMax(takeOver), len(res.TwoWriters), lost, keptWord, standDown.Seconds(), gapMax(rollback), falseCritical)
}

// alerts logs every episode of a critical alert pending or firing while Prometheus ran, until
// the release was uninstalled, and returns the number of false ones: every episode but those
// that began during the trap (from its render until the binaries were active again after the
// fix). The trap is no planned step, and a condition it started (KCM's queues taking work) may
// hold a while after it: the rules look back up to 10 minutes; the same alert back after a gap
// is an episode of its own. Pending counts, not only firing: the critical rules wait 2 to 15
// minutes ("for"), longer than any step here, so an alert pending during a planned step is one
// that a slower operator would have been paged by. The test asserts there are none.
func (e *e2e) alerts(p *prometheus, until, trapFrom, trapTo time.Time) int {
	e.t.Helper()
	got, err := p.criticalAlerts(p.start, until, trapFrom, trapTo)
	if err != nil {
		e.t.Fatalf("critical alerts: %v", err)
	}
	n := 0
	for _, a := range got {
		inTrap := !a.First.Before(trapFrom) && !a.First.After(trapTo)
		what := "false: pending during a planned step"
		if inTrap {
			what = "the trap's"
		} else {
			n++
		}
		state := "pending"
		if a.Fired {
			state = "fired"
		}
		e.logf("critical alert %s{%s} %s from %s to %s (%d evaluations outside the trap, %d in it): %s",
			a.Name, a.Labels, state, a.First.Format(time.StampMilli), a.Last.Format(time.StampMilli), a.Planned, a.Trap, what)
	}
	if len(got) == 0 {
		e.logf("no critical alert pending or firing while Prometheus ran")
	}
	return n
}

// waitFiring waits until alert fires for every binary's job (the final state of the trap: its
// "for" is a minute), or fails after timeout.
func (e *e2e) waitFiring(p *prometheus, alert string, timeout time.Duration) {
	e.t.Helper()
	start := time.Now()
	var jobs map[string]bool
	err := wait.PollUntilContextTimeout(e.ctx, 2*time.Second, timeout, true, func(context.Context) (bool, error) {
		res, err := p.query(fmt.Sprintf(`ALERTS{alertname=%q, alertstate="firing"}`, alert), time.Now())
		if err != nil {
			return false, nil
		}
		jobs = map[string]bool{}
		for _, r := range res {
			jobs[r.Metric["job"]] = true
		}
		return len(jobs) == len(binaries), nil
	})
	if err != nil {
		e.t.Fatalf("%s firing for %d of the %d binaries after %s: %v", alert, len(jobs), len(binaries), timeout, jobs)
	}
	e.logf("%s firing for every binary, %.1fs after the wait began", alert, time.Since(start).Seconds())
}

// podID is a KCM Pod's identity: its UID and its container's start (the container's ID is
// not part of it: a restart of the same container changes only its start and ID).
type podID struct{ uid, started, container string }

// kcmPod is the KCM mirror Pod's identity (one control-plane node).
func (e *e2e) kcmPod() podID {
	e.t.Helper()
	pods, err := e.client.CoreV1().Pods("kube-system").List(e.ctx, metav1.ListOptions{LabelSelector: "component=kube-controller-manager"})
	if err != nil || len(pods.Items) != 1 {
		e.t.Fatalf("KCM's Pod: %v (%d Pods)", err, len(pods.Items))
	}
	p := pods.Items[0]
	id := podID{uid: string(p.UID)}
	for _, s := range p.Status.ContainerStatuses {
		if s.State.Running != nil {
			id.started = s.State.Running.StartedAt.UTC().Format(time.RFC3339)
			id.container = strings.TrimPrefix(s.ContainerID, "containerd://")
		}
	}
	return id
}

// waitKCMRestarted waits until KCM's Pod runs a container started after the one in before.
func (e *e2e) waitKCMRestarted(before podID) {
	e.t.Helper()
	err := wait.PollUntilContextTimeout(e.ctx, 500*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		now := e.kcmPod()
		return now.container != "" && now.container != before.container, nil
	})
	if err != nil {
		e.t.Fatalf("KCM's container was not restarted: %v", err)
	}
	e.logf("KCM's container restarted by the kubelet")
}

// lapses describes, per binary, each stretch its controllers stood down in [from, to).
func lapses(evs []TakeOverEvent, from, to time.Time) string {
	var parts []string
	for _, b := range binaries {
		var stop time.Time
		var got []string
		for _, ev := range between(evs, from, to) {
			switch {
			case ev.Binary != b:
			case !ev.Start:
				stop = ev.At
			case !stop.IsZero():
				got = append(got, fmt.Sprintf("stood down %.1fs after the kill for %.1fs", stop.Sub(from).Seconds(), ev.At.Sub(stop).Seconds()))
				stop = time.Time{}
			}
		}
		if !stop.IsZero() {
			got = append(got, "stood down and never came back")
		}
		if len(got) == 0 {
			got = []string{"kept running"}
		}
		parts = append(parts, b+" "+strings.Join(got, ", "))
	}
	return strings.Join(parts, "; ")
}

// manifestHashes are the SHA-256 of every static Pod manifest, by file.
func manifestHashes(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(manifestsDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s: %v", manifestsDir, err)
	}
	out := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(f)] = fmt.Sprintf("%x", sha256.Sum256(b))[:12]
	}
	return out
}

// waitKCMLeads waits until a KCM process acquired its Lease after t.
func (e *e2e) waitKCMLeads(t0 time.Time) {
	e.t.Helper()
	err := wait.PollUntilContextTimeout(e.ctx, 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		for _, h := range e.leases.Acquired() {
			if h.From.After(t0) {
				e.logf("KCM's Lease acquired by %s at %s, %.1fs after the manifest", h.ID, h.From.Format(time.StampMilli), h.From.Sub(t0).Seconds())
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		e.t.Fatalf("no KCM process took its Lease after %s: %v", t0.Format(time.StampMilli), err)
	}
}

// takeOverEvents reads every take-over line of the release's Pods (their logs also kept in the
// work directory).
func (e *e2e) takeOverEvents() []TakeOverEvent {
	e.t.Helper()
	pods, err := e.client.CoreV1().Pods(namespace).List(e.ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + release})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []TakeOverEvent
	for _, p := range pods.Items {
		restarted := false
		for _, s := range p.Status.ContainerStatuses {
			restarted = restarted || s.RestartCount > 0
		}
		for _, previous := range []bool{true, false} {
			if previous && !restarted {
				continue
			}
			b, err := e.client.CoreV1().Pods(namespace).GetLogs(p.Name, &corev1.PodLogOptions{Previous: previous}).DoRaw(e.ctx)
			if err != nil {
				e.t.Fatalf("logs of %s: %v", p.Name, err)
			}
			name := p.Name
			if previous {
				name += ".previous"
			}
			if err := os.WriteFile(filepath.Join(e.work, "pod-"+name+".log"), b, 0o644); err != nil {
				e.t.Fatal(err)
			}
			evs, err := TakeOverEvents(name, bytes.NewReader(b))
			if err != nil {
				e.t.Fatal(err)
			}
			out = append(out, evs...)
		}
	}
	return out
}

// between are the events in [from, to).
func between(evs []TakeOverEvent, from, to time.Time) []TakeOverEvent {
	var out []TakeOverEvent
	for _, ev := range evs {
		if !ev.At.Before(from) && ev.At.Before(to) {
			out = append(out, ev)
		}
	}
	return out
}

// firstOf is each binary's first event of the kind (start or stop) in [from, to).
func firstOf(evs []TakeOverEvent, from, to time.Time, start bool) map[string]time.Time {
	out := map[string]time.Time{}
	for _, ev := range between(evs, from, to) {
		if ev.Start != start {
			continue
		}
		if at, ok := out[ev.Binary]; !ok || ev.At.Before(at) {
			out[ev.Binary] = ev.At
		}
	}
	return out
}

// since describes, per binary, the time from t0 to its first start (or stop) before to.
func since(evs []TakeOverEvent, t0, to time.Time, start bool) string {
	first := firstOf(evs, t0, to, start)
	var parts []string
	for _, b := range binaries {
		if at, ok := first[b]; ok {
			parts = append(parts, fmt.Sprintf("%s %.1fs", b, at.Sub(t0).Seconds()))
		} else {
			parts = append(parts, b+" none")
		}
	}
	return strings.Join(parts, ", ")
}

// stoodDown asserts that every binary stopped its controllers after t0 (a render of KCM with
// them on) and before KCM's first write as one of the replaced controllers, and that no
// kcm-split write came after that first write; it returns the longest stand-down (from t0).
func stoodDown(t *testing.T, e *e2e, evs []testenv.AuditEvent, ours []TakeOverEvent, what string, t0, to time.Time,
	kcmSide, ourSide func(testenv.AuditEvent) bool) time.Duration {
	t.Helper()
	stops := firstOf(ours, t0, to, false)
	kcmFirst, ok := handover.FirstWrite(evs, handover.Term{From: t0, To: to}, kcmSide)
	if !ok {
		t.Errorf("%s: no write by KCM's replaced controllers after the render", what)
	}
	ourLast, _ := handover.LastWrite(evs, handover.Term{From: t0.Add(-time.Minute), To: to}, ourSide)
	var worst time.Duration
	var parts []string
	for _, b := range binaries {
		at, stopped := stops[b]
		if !stopped {
			t.Errorf("%s: %s never logged \"stopping them\" after the render", what, b)
			continue
		}
		worst = max(worst, at.Sub(t0))
		parts = append(parts, fmt.Sprintf("%s %.1fs", b, at.Sub(t0).Seconds()))
		if ok && !at.Before(kcmFirst) {
			t.Errorf("%s: %s stood down at %s, not before KCM's first write at %s", what, b, at.Format(time.StampMilli), kcmFirst.Format(time.StampMilli))
		}
	}
	e.logf("%s: stand-down after KCM's manifest: %s", what, strings.Join(parts, ", "))
	if ok {
		e.logf("%s: KCM's first write as a replaced controller %.1fs after the manifest; kcm-split's last write %.1fs after it",
			what, kcmFirst.Sub(t0).Seconds(), ourLast.Sub(t0).Seconds())
		if !ourLast.IsZero() && !ourLast.Before(kcmFirst) {
			t.Errorf("%s: kcm-split wrote at %s, after KCM's first write at %s", what, ourLast.Format(time.StampMilli), kcmFirst.Format(time.StampMilli))
		}
	}
	return worst
}

// persists keeps the writes that store something: not the reviews a binary creates to
// authorize a scrape of its /metrics (TokenReview, SubjectAccessReview), which are answered and
// forgotten.
func persists(ev testenv.AuditEvent) bool {
	g := ev.ObjectRef.APIGroup
	return !((g == "authentication.k8s.io" || g == "authorization.k8s.io") && strings.HasSuffix(ev.ObjectRef.Resource, "reviews"))
}

func termsOf(hs []HolderTerm) []handover.Term {
	out := make([]handover.Term, 0, len(hs))
	for _, h := range hs {
		out = append(out, h.Term)
	}
	return out
}

func describe(ev testenv.AuditEvent) string {
	return fmt.Sprintf("%s %s %s at %s (%s)", ev.User.Username, ev.Verb, handover.ObjectKey(ev), ev.RequestReceivedTimestamp.Format(time.StampMicro), ev.UserAgent)
}

// kcmArgs are the KCM flags deploy/kubeadm/up.sh set through the ClusterConfiguration.
func kcmArgs(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for kv := range strings.FieldsSeq(os.Getenv("KA_KCM_ARGS")) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			t.Fatalf("KA_KCM_ARGS: %q is not name=value", kv)
		}
		out[k] = v
	}
	return out
}

func kcmArgDuration(t *testing.T, name string, def time.Duration) time.Duration {
	t.Helper()
	v, ok := kcmArgs(t)[name]
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("KA_KCM_ARGS %s: %v", name, err)
	}
	return d
}

// checkCarried asserts that the plan's values carry every flag set on KCM to its binary.
func checkCarried(t *testing.T, valuesFile string) {
	t.Helper()
	b, err := os.ReadFile(valuesFile)
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Controllers map[string]struct {
			Enabled bool           `json:"enabled"`
			Flags   map[string]any `json:"flags"`
		} `json:"controllers"`
		TakeOver struct {
			Enabled bool `json:"enabled"`
		} `json:"takeOverFromKCM"`
	}
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", valuesFile, err)
	}
	if !v.TakeOver.Enabled {
		t.Errorf("the plan's values do not enable takeOverFromKCM")
	}
	for _, alias := range []string{"endpoints", "namespace", "nodelifecycle", "pvbinder", "quota", "servicelb"} {
		if !v.Controllers[alias].Enabled {
			t.Errorf("the plan's values do not enable %s", alias)
		}
	}
	for flag, val := range kcmArgs(t) {
		alias, ok := carriedTo[flag]
		if !ok {
			t.Fatalf("KA_KCM_ARGS sets --%s, which the e2e does not know the binary of", flag)
		}
		if got := fmt.Sprint(v.Controllers[alias].Flags[flag]); got != val {
			t.Errorf("KCM's --%s=%s is not carried to controllers.%s.flags (got %q)", flag, val, alias, got)
		}
	}
}

// checkDeployments asserts that each carried flag reached its binary's container.
func checkDeployments(t *testing.T, e *e2e) {
	t.Helper()
	deps, err := e.client.AppsV1().Deployments(namespace).List(e.ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + release})
	if err != nil {
		t.Fatal(err)
	}
	args := map[string][]string{}
	for _, d := range deps.Items {
		c := d.Spec.Template.Spec.Containers[0]
		args[d.Labels["app.kubernetes.io/component"]] = append(slices.Clone(c.Command), c.Args...)
	}
	ids := map[string]string{"endpoints": "endpoints-controller", "namespace": "namespace-controller", "nodelifecycle": "nodelifecycle-controller",
		"pvbinder": "pv-binder-controller", "quota": "quota-controller"}
	for flag, val := range kcmArgs(t) {
		id := ids[carriedTo[flag]]
		if !slices.Contains(args[id], "--"+flag+"="+val) {
			t.Errorf("Deployment of %s runs without --%s=%s: %v", id, flag, val, args[id])
		}
	}
	if len(args) != len(binaries) {
		t.Errorf("the chart runs %d binaries, want %d: %v", len(args), len(binaries), slices.Sorted(maps.Keys(args)))
	}
}

// siteValues are the e2e's own values (the runbook's site-values.yaml): the images just built
// and imported into the node (never pulled), one replica each on this one node, and the
// node's host mapped to its Node name where they differ (hostNodes), as the runbook asks.
func siteValues(t *testing.T, hostNodes map[string]string) []byte {
	t.Helper()
	tag := os.Getenv("KCM_SPLIT_KUBEADM_E2E_IMAGE_TAG")
	if tag == "" {
		t.Fatal("KCM_SPLIT_KUBEADM_E2E_IMAGE_TAG is not set (the tag `make images` gave)")
	}
	out := fmt.Appendf(nil, "defaults:\n  image:\n    tag: %q\n    pullPolicy: Never\n  replicas: 1\n", tag)
	if len(hostNodes) > 0 {
		out = append(out, "takeOverFromKCM:\n  leaseHostNodes:\n"...)
		for _, h := range slices.Sorted(maps.Keys(hostNodes)) {
			out = fmt.Appendf(out, "    %q: %q\n", h, hostNodes[h])
		}
	}
	return out
}

// hostNodes maps this machine's host name to the one Node's name, when they differ (kubeadm's
// nodeRegistration.name here): what kube-controller-manager's Lease identity names against
// the node of its Pod.
func (e *e2e) hostNodes() map[string]string {
	e.t.Helper()
	host, err := os.Hostname()
	if err != nil {
		e.t.Fatal(err)
	}
	nodes, err := e.client.CoreV1().Nodes().List(e.ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	if len(nodes.Items) != 1 {
		e.t.Fatalf("%d Nodes, want the one of kubeadm-up", len(nodes.Items))
	}
	if node := nodes.Items[0].Name; !strings.EqualFold(node, host) {
		return map[string]string{strings.ToLower(host): node}
	}
	return nil
}

// setup reads the runbook, checks its settings against the e2e's, and starts the record of
// KCM's Lease.
func setup(t *testing.T) *e2e {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	work := os.Getenv("KCM_SPLIT_KUBEADM_E2E_WORK")
	if work == "" {
		work = t.TempDir()
	}
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	rb, err := ReadRunbook(filepath.Join(root, "charts", "kcm-split", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := os.Getenv("KUBECONFIG")
	settings := map[string]string{"KUBECONFIG": kubeconfig, "NS": namespace, "RELEASE": release,
		"CHART": filepath.Join(root, "charts", "kcm-split"), "CONTROLLERS": controllers, "WORK": work}
	if got, want := slices.Sorted(slices.Values(rb.Exported("settings"))), slices.Sorted(maps.Keys(settings)); !slices.Equal(got, want) {
		t.Fatalf("the runbook's settings export %v, the e2e gives %v", got, want)
	}
	var env []string
	for k, v := range settings {
		env = append(env, k+"="+v)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 100, 200 // the churn's many small steps, not throttled here
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	e := &e2e{t: t, ctx: ctx, root: root, work: work, env: env, rb: rb, client: client, dyn: dyn, leases: &LeaseLog{}, began: time.Now()}
	// KCM's Lease, every state seen: its processes' terms.
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace("kube-system"),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "metadata.name=" + kcmLease }))
	inf := f.Coordination().V1().Leases().Informer()
	observe := func(obj any) {
		if l, ok := obj.(*coordinationv1.Lease); ok {
			e.leases.Observe(l)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: observe, UpdateFunc: func(_, o any) { observe(o) }}); err != nil {
		t.Fatal(err)
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("KCM's Lease never synced")
	}
	e.logf("work directory %s", work)
	return e
}
