package drills

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/kcm-split/kcm-split/shared/sharding"
	"github.com/kcm-split/kcm-split/shared/testenv"
)

// ShardDrillClientEnv, set, runs TestShardingDrill once more against an apiserver with the
// ShardedListAndWatch gate off (the shards filter on the client side). The fence, the drain
// and the Leases do not depend on who filters; make test runs the gate-on mode only.
const ShardDrillClientEnv = "KCM_SPLIT_SHARD_DRILL_CLIENT"

// shardLeaseDuration is fastLease's: an old-layout Lease nobody gives up blocks a new layout
// for this long.
const shardLeaseDuration = 4 * time.Second

// TestShardingDrill changes the shard count of endpoints-controller (--shard-hash=fnv) and
// quota-controller (--shard-hash=mixed) from 2 to 4 and back to 2, then rolls each of the 2
// shards over to a new process, all under a steady churn of readiness flips, Pods and
// Services created and deleted in 28 namespaces named as clusters name them, with a
// ResourceQuota each; it then asserts from the audit log that no Endpoints or EndpointSlice
// of a live Service was deleted, that no write of one process landed outside
// its own term, in another shard's namespace or during a term of another layout, and that
// every old process released its Lease only after its last write; and from the live objects
// that every Service's Endpoints and slices match its Pods and every quota counts what is
// there.
func TestShardingDrill(t *testing.T) {
	testenv.Require(t, env)
	modes := []string{sharding.ModeServer}
	if os.Getenv(ShardDrillClientEnv) != "" {
		modes = append(modes, sharding.ModeClient)
	}
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) { shardingDrill(t, mode) })
	}
}

type shardProc struct {
	*testenv.Controller
	bin   testenv.Binary
	shard sharding.Shard
	id    string
	// started is when the process was started, term when it was sent SIGTERM.
	started, term time.Time
}

type phase struct {
	name string
	at   time.Time
}

type shardDrill struct {
	t      *testing.T
	e      *testenv.Env
	c      kubernetes.Interface
	procs  []*shardProc
	phases []phase
}

var shardBins = []testenv.Binary{bin("endpoints-controller", "endpoints"), bin("quota-controller", "quota")}

// Over 80 lines: the layouts (2 shards, 2 -> 4, 4 -> 2, rolling update, settle) must run in order on one control plane under one churn.
func shardingDrill(t *testing.T, mode string) {
	begin := time.Now()
	args := []string{}
	if mode == sharding.ModeServer {
		args = append(args, "--feature-gates=ShardedListAndWatch=true")
	}
	e, err := testenv.Start(testenv.Options{
		ExtraAPIServerArgs: args,
		AuditPolicy:        shardAuditPolicy,
		Setup: func(e *testenv.Env) error {
			c, err := kubernetes.NewForConfig(e.Config)
			if err != nil {
				return err
			}
			_, err = c.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "drill-node"}}, metav1.CreateOptions{})
			return err
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Stop)
	d := &shardDrill{t: t, e: e, c: e.Client(t)}
	namespaces := drillNamespaces(t)
	ch := newChurn(t, d.c)
	ctx := context.Background()
	if err := ch.setup(ctx, namespaces); err != nil {
		t.Fatal(err)
	}
	for _, b := range shardBins {
		b.Path(t) // build before the clock matters
	}
	t.Logf("control plane (%s filtering), binaries and %d namespaces ready in %s", mode, len(namespaces), span(time.Since(begin)))

	// 2 shards, each with a hot standby.
	d.mark("2 shards")
	var two []*shardProc
	for _, b := range shardBins {
		for i := range 2 {
			two = append(two, d.start(b, sharding.Shard{Index: i, Count: 2, Hash: shardHashes[b.ID]}, "a"))
		}
	}
	d.waitLeading(two)
	for _, p := range two[:] {
		two = append(two, d.start(p.bin, p.shard, "b"))
	}
	d.waitReady(two[4:])
	cctx, stopChurn := context.WithCancel(ctx)
	defer stopChurn()
	ch.run(cctx, namespaces, 100*time.Millisecond)
	time.Sleep(6 * time.Second)

	// 2 -> 4: the new layout waits for both old Leases, then takes over once they are released.
	d.mark("2 -> 4")
	four := d.changeLayout(two, 4, 2)
	d.mark("4 shards")
	time.Sleep(6 * time.Second)

	// 4 -> 2, no standbys.
	d.mark("4 -> 2")
	back := d.changeLayout(four, 2, 4)
	d.mark("2 shards again")
	time.Sleep(6 * time.Second)

	// Rolling update: each shard gets a new process, the old one is sent SIGTERM, the new one
	// (the standby meanwhile) takes over.
	d.mark("rolling update")
	takeovers := map[string][]*shardProc{} // binary -> old, new, old, new
	var final []*shardProc
	for i := range 2 {
		var olds, news []*shardProc
		for _, p := range back {
			if p.shard.Index == i {
				olds = append(olds, p)
				news = append(news, d.start(p.bin, p.shard, "r"))
			}
		}
		d.waitReady(news)
		for _, n := range news {
			d.waitUnblocked(n)
		}
		d.stop(olds)
		d.waitLeading(news)
		final = append(final, news...)
		for k := range olds {
			takeovers[olds[k].bin.ID] = append(takeovers[olds[k].bin.ID], olds[k], news[k])
		}
		time.Sleep(2 * time.Second)
	}
	d.mark("settle")
	stopChurn()
	<-ch.done
	settleStart := time.Now()
	why := ""
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		w, err := converged(ctx, d.c, namespaces)
		if err != nil {
			return false, nil // a slow list on a busy machine: look again (why keeps the last answer)
		}
		why = w
		return w == "", nil
	}); err != nil {
		t.Errorf("not converged 90s after the churn stopped (something was lost): %s", why)
	}
	settled := time.Since(settleStart)
	d.mark("end")

	for _, p := range final {
		d.checkMode(p, mode)
	}
	d.verify(takeovers)
	report(t, "sharding", mode, fmt.Sprintf("churn %s; converged %s after the churn stopped; whole drill %s", ch.summary(), span(settled), span(time.Since(begin))))
}

func (d *shardDrill) mark(name string) {
	d.phases = append(d.phases, phase{name: name, at: time.Now()})
	d.t.Logf("phase: %s", name)
}

// start runs b as shard s; tag tells processes of one shard apart in logs.
func (d *shardDrill) start(b testenv.Binary, s sharding.Shard, tag string) *shardProc {
	d.t.Helper()
	name := fmt.Sprintf("%s-%s-%s", strings.TrimSuffix(b.ID, "-controller"), s, tag)
	args := append(append([]string{}, fastLease...), fmt.Sprintf("--shards=%d", s.Count), fmt.Sprintf("--shard-index=%d", s.Index), "--shard-hash="+string(s.Hash.Name()))
	p := &shardProc{bin: b, shard: s, started: time.Now()}
	p.Controller = d.e.Start(d.t, b, name, args...)
	p.id = p.Identity()
	d.procs = append(d.procs, p)
	return p
}

func (d *shardDrill) waitLeading(ps []*shardProc) {
	d.t.Helper()
	for _, p := range ps {
		p.WaitLeadingAndSynced(p.shard.LeaseName(p.bin.ID), testenv.LeadTimeout)
	}
}

// waitReady waits until each process answers Ready (a standby is Ready).
func (d *shardDrill) waitReady(ps []*shardProc) {
	d.t.Helper()
	for _, p := range ps {
		if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, testenv.LeadTimeout, true, func(context.Context) (bool, error) {
			code, _ := p.Get("/readyz")
			return code == http.StatusOK, nil
		}); err != nil {
			d.t.Fatalf("%s never Ready: %v", p.Name, err)
		}
	}
}

func blockingSeries(p *shardProc) string {
	return fmt.Sprintf(`kcm_split_shard_layout_blocking_leases{binary=%q,shard="%d",shards="%d"}`, p.bin.ID, p.shard.Index, p.shard.Count)
}

// waitBlocked waits until p sees n Leases of another layout held (the fence is up).
func (d *shardDrill) waitBlocked(p *shardProc, n int) {
	d.t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return p.Metric(blockingSeries(p)) == float64(n), nil
	}); err != nil {
		d.t.Fatalf("%s never saw the %d Leases of the old layout held: %s = %v", p.Name, n, blockingSeries(p), p.Metric(blockingSeries(p)))
	}
}

// waitUnblocked waits until p has listed the Leases and sees no other layout's held.
func (d *shardDrill) waitUnblocked(p *shardProc) {
	d.waitBlocked(p, 0)
}

// stop sends SIGTERM to every process at once (as a Deployment's deletion would) and waits
// for each to exit on it alone, with code 0.
func (d *shardDrill) stop(ps []*shardProc) {
	d.t.Helper()
	at := time.Now()
	var wg sync.WaitGroup
	clean := make([]bool, len(ps))
	for k, p := range ps {
		p.term = at
		wg.Go(func() { clean[k] = p.Stop(30 * time.Second) })
	}
	wg.Wait()
	for k, p := range ps {
		if !clean[k] || p.ExitCode() != 0 {
			d.t.Errorf("%s did not exit cleanly on SIGTERM (within 30s: %v, code %d)", p.Name, clean[k], p.ExitCode())
		}
	}
}

// changeLayout starts the new layout (count shards of each binary, no standbys), waits until
// each new process sees the oldCount Leases of the old layout held, sends SIGTERM to every
// old process, and waits until the new layout leads.
func (d *shardDrill) changeLayout(old []*shardProc, count, oldCount int) []*shardProc {
	d.t.Helper()
	var news []*shardProc
	for _, b := range shardBins {
		for i := range count {
			news = append(news, d.start(b, sharding.Shard{Index: i, Count: count, Hash: shardHashes[b.ID]}, fmt.Sprint(len(d.phases))))
		}
	}
	for _, p := range news {
		d.waitBlocked(p, oldCount)
	}
	time.Sleep(time.Second) // the new layout waits under churn
	d.stop(old)
	d.waitLeading(news)
	return news
}

// checkMode asserts the filtering mode the drill runs in, as the process reports it: a
// shard of the mixed hash filters on the client side whatever the gate.
func (d *shardDrill) checkMode(p *shardProc, mode string) {
	if !p.shard.Hash.ServerSide() {
		mode = sharding.ModeClient
	}
	resources := map[string][]string{"endpoints-controller": {"pods", "services"}, "quota-controller": {"pods", "resourcequotas"}}[p.bin.ID]
	for _, r := range resources {
		series := fmt.Sprintf(`kcm_split_shard_info{binary=%q,mode=%q,resource=%q,shard="%d",shards="%d"}`, p.bin.ID, mode, r, p.shard.Index, p.shard.Count)
		if v := p.Metric(series); v != 1 {
			d.t.Errorf("%s: %s = %v, want 1", p.Name, series, v)
		}
	}
}

// verify reads the audit log and asserts (a) no Endpoints or EndpointSlice deleted while its
// Service existed, (b) every controller write inside its process's own term, in a namespace
// of its shard, outside every term of another layout of its binary, and no object written by
// two shards in overlapping terms, (c) every process sent SIGTERM gave its Lease up (a
// release after its last write, not an expiry); then prints the figures.
// Over 80 lines: one pass over the audit log builds the terms, writers and per-phase counts that the three checks and the figures all read.
func (d *shardDrill) verify(takeovers map[string][]*shardProc) {
	t := d.t
	evs, err := readAudit(d.e)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]*shardProc{}
	for _, p := range d.procs {
		byID[p.id] = p
	}
	terms := leaseTerms(evs, shardLeaseDuration, func(id string) bool { p := byID[id]; return p == nil || p.Exited() })
	lives := serviceLives(evs)

	failures := map[string]int{}
	fail := func(kind, format string, args ...any) {
		failures[kind]++
		if failures[kind] <= 10 {
			t.Errorf(kind+": "+format, args...)
		}
	}
	phaseOf := func(at time.Time) string {
		name := "before"
		for _, ph := range d.phases {
			if !at.Before(ph.at) {
				name = ph.name
			}
		}
		return name
	}
	perPhase := map[string]map[string]int{}
	first := map[string]time.Time{}
	writers := map[string]map[string]bool{} // object -> identities
	total, deletes := 0, 0
	byResource := map[string]int{} // Events are written apart from the controller's own writes
	for _, ev := range evs {
		id := ev.Identity()
		if !ev.IsWrite() || !ev.Succeeded() || id == "" || strings.HasSuffix(id, leaderAgentSuffix) {
			continue
		}
		p := byID[id]
		if p == nil {
			fail("unknown writer", "%s %s %s/%s by %q", ev.Verb, ev.ObjectRef.Resource, ev.ObjectRef.Namespace, ev.ObjectRef.Name, ev.UserAgent)
			continue
		}
		total++
		byResource[ev.ObjectRef.Resource]++
		at := ev.RequestReceivedTimestamp
		what := fmt.Sprintf("%s %s %s/%s by %s at %s", ev.Verb, ev.ObjectRef.Resource, ev.ObjectRef.Namespace, ev.ObjectRef.Name, p.Name, at.Format(time.StampMicro))
		if perPhase[phaseOf(at)] == nil {
			perPhase[phaseOf(at)] = map[string]int{}
		}
		perPhase[phaseOf(at)][p.bin.ID]++
		if _, ok := first[id]; !ok {
			first[id] = at
		}
		own := false
		for _, tm := range terms[id] {
			own = own || tm.covers(at)
		}
		if !own {
			fail("write outside its own term", "%s (terms %v)", what, terms[id])
		}
		ns := ev.ObjectRef.Namespace
		if ns == "" {
			fail("cluster-scoped write", "%s", what)
		} else if k := shardOf(ns, p.shard.Count, p.shard.Hash); k != p.shard.Index {
			fail("write in another shard's namespace", "%s: %s belongs to shard %d of %d", what, ns, k, p.shard.Count)
		}
		for _, q := range d.procs {
			if q.bin.ID != p.bin.ID || q.shard.Count == p.shard.Count {
				continue
			}
			for _, tm := range terms[q.id] {
				if tm.covers(at) {
					fail("write during another layout's term", "%s while %s (%d shards) held %s from %s to %s", what, q.Name, q.shard.Count, tm.lease,
						tm.from.Format(time.StampMicro), tm.to.Format(time.StampMicro))
				}
			}
		}
		key := ev.ObjectRef.Resource + " " + ns + "/" + ev.ObjectRef.Name
		if writers[key] == nil {
			writers[key] = map[string]bool{}
		}
		writers[key][id] = true
		if ev.Verb == "delete" || ev.Verb == "deletecollection" {
			deletes++
			svc := ""
			switch ev.ObjectRef.Resource {
			case "endpoints":
				svc = ev.ObjectRef.Name
			case "endpointslices":
				svc = sliceService(ev.ObjectRef.Name)
			}
			if svc != "" && alive(lives[ns+"/"+svc], at) {
				fail("delete of a live Service's endpoints", "%s: Service %s/%s existed", what, ns, svc)
			}
		}
	}
	if total == 0 {
		t.Fatal("test is broken: no controller write in the audit log")
	}
	// (b) directly: no object written by two shards whose terms overlap.
	shared := 0
	for key, ids := range writers {
		var ps []*shardProc
		for id := range ids {
			ps = append(ps, byID[id])
		}
		if len(ps) > 1 {
			shared++
		}
		for i, a := range ps {
			for _, b := range ps[i+1:] {
				if a.shard == b.shard {
					continue // one shard, one Lease: two processes of it in turn
				}
				for _, ta := range terms[a.id] {
					for _, tb := range terms[b.id] {
						if ta.overlaps(tb) {
							fail("object written by two shards in overlapping terms", "%s by %s and %s", key, a.Name, b.Name)
						}
					}
				}
			}
		}
	}
	// (c) every process sent SIGTERM released its Lease (after its last write: checked above,
	// a later write would be outside its term).
	for _, p := range d.procs {
		if p.term.IsZero() {
			continue
		}
		for _, tm := range terms[p.id] {
			if !tm.released {
				fail("Lease not released on SIGTERM", "%s held %s from %s and let it expire", p.Name, tm.lease, tm.from.Format(time.StampMicro))
			}
		}
	}
	for kind, n := range failures {
		t.Errorf("%d × %s", n, kind)
	}

	// Figures.
	for _, b := range shardBins {
		var parts []string
		for _, ph := range d.phases {
			if n := perPhase[ph.name][b.ID]; n > 0 {
				parts = append(parts, fmt.Sprintf("%s %d", ph.name, n))
			}
		}
		report(t, "sharding writes per phase", b.ID, strings.Join(parts, ", "))
	}
	report(t, "sharding audit", "both", fmt.Sprintf("%d controller writes (%d deletes; by resource %v), %d objects written by more than one process, %d processes; 0 violations: %v",
		total, deletes, byResource, shared, len(d.procs), len(failures) == 0))
	for k, ph := range d.phases {
		if !strings.Contains(ph.name, "->") {
			continue
		}
		end := d.phases[k+1].at
		for _, b := range shardBins {
			var lastRelease time.Time
			var drain, toLease, toWrite []time.Duration
			var margin, handover []time.Duration
			standbyTerms := 0
			for _, p := range d.procs {
				if p.bin.ID != b.ID {
					continue
				}
				if !p.term.IsZero() && !p.term.Before(ph.at) && p.term.Before(end) {
					for _, tm := range terms[p.id] {
						if tm.to.After(p.term) {
							drain = append(drain, tm.to.Sub(p.term))
							lastRelease = later(lastRelease, tm.to)
						}
						if tm.from.After(p.term) {
							standbyTerms++
						}
					}
				}
			}
			for _, p := range d.procs {
				if p.bin.ID != b.ID || p.started.Before(ph.at) || !p.started.Before(end) {
					continue
				}
				if ts := terms[p.id]; len(ts) > 0 {
					toLease = append(toLease, ts[0].from.Sub(p.started))
					handover = append(handover, ts[0].from.Sub(lastRelease))
				}
				if w, ok := first[p.id]; ok {
					toWrite = append(toWrite, w.Sub(p.started))
					margin = append(margin, w.Sub(lastRelease))
				}
			}
			report(t, "sharding fence "+ph.name, b.ID, fmt.Sprintf("new process start to its Lease %s, to its first write %s (the old layout is stopped only once every new process saw its Leases held, plus 1 s); SIGTERM to the old processes' releases %s (%d old standbys took a Lease in the wave); old layout's last release to the new Leases %s, to their first writes %s",
				minMax(toLease), minMax(toWrite), minMax(drain), standbyTerms, minMax(handover), minMax(margin)))
		}
	}
	for bin, pairs := range takeovers {
		var take, drain []time.Duration
		for k := 0; k+1 < len(pairs); k += 2 {
			old, nu := pairs[k], pairs[k+1]
			if ts := terms[nu.id]; len(ts) > 0 {
				take = append(take, ts[0].from.Sub(old.term))
			}
			if ts := terms[old.id]; len(ts) > 0 {
				drain = append(drain, ts[len(ts)-1].to.Sub(old.term))
			}
		}
		report(t, "sharding rolling update", bin, fmt.Sprintf("SIGTERM to the old process's release %s, to the standby's Lease %s", minMax(drain), minMax(take)))
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
