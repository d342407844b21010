package drills

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kcm-split/kcm-split/shared/sharding"
	"github.com/kcm-split/kcm-split/shared/testenv"
)

// shardRenewDeadline is fastLease's renew deadline: a holder's fence refuses its writes this
// long after the renewal it stamped (renewTime).
const shardRenewDeadline = 3 * time.Second

// expiredWaitMessage is what a shard logs for a Lease of another layout it does not wait for.
const expiredWaitMessage = "expired before this process started; not waiting for it"

// TestShardingExpiredLease is the layout drill's case of the Leases an uninstall leaves: a
// layout killed without releasing (SIGKILL; an uninstall's release is refused once Helm has
// deleted the Role) leaves Leases that are expired but still name their holder. A new layout
// waits for such a Lease until its renewTime + duration + a lease duration of clock skew, no
// longer than a duration after first sight: found fresh (4 shards started at once), it waits;
// found already past that (3 shards started later), it does not wait at all. Either way no
// Lease of the new layout is acquired before the old holder's fence closed (renewTime + renew
// deadline), on the apiserver's record of both Leases; the times are printed.
// Over 80 lines: the two cases run in order on one control plane, the second on the Leases the first leaves.
func TestShardingExpiredLease(t *testing.T) {
	testenv.Require(t, env)
	c := env.Client(t)
	ctx := context.Background()
	leaseNS := "drill-expired-leases"
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: leaseNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	b := bin("endpoints-controller", "endpoints")
	b.Path(t) // build before the clock matters
	start := func(count int, tag string) ([]*testenv.Controller, time.Time) {
		at := time.Now()
		var ps []*testenv.Controller
		for i := range count {
			ps = append(ps, env.Start(t, b, fmt.Sprintf("expired-%s-%d-of-%d", tag, i, count), append(append([]string{}, fastLease...),
				fmt.Sprintf("--shards=%d", count), fmt.Sprintf("--shard-index=%d", i), "--shard-hash=mixed",
				"--leader-elect-resource-namespace="+leaseNS)...))
		}
		for i, p := range ps {
			p.WaitLeadingAndSynced(sharding.Shard{Index: i, Count: count, Hash: sharding.HashMixed}.LeaseName(b.Lease()), testenv.LeadTimeout)
		}
		return ps, at
	}
	kill := func(ps []*testenv.Controller) {
		for _, p := range ps {
			p.Kill()
		}
	}

	// The old layout: 2 shards, killed as an uninstall whose release is refused leaves them.
	two, _ := start(2, "old")
	kill(two)
	old := layoutLeases(t, c, leaseNS, 2)

	// Case 1, found fresh: 4 shards started at once wait for the old Leases' expiry.
	four, began := start(4, "fresh")
	fresh := layoutLeases(t, c, leaseNS, 4)
	checkAfter(t, "found fresh", old, fresh, shardLeaseDuration)
	for _, p := range four {
		if logHas(p, expiredWaitMessage) {
			t.Errorf("%s did not wait for Leases it found fresh", p.Name)
		}
	}
	report(t, "sharding expired Lease", "found fresh", fmt.Sprintf("4 shards started %s after the 2 shards' last renewal, leading %s after their start; old renewal to new acquisition %s (held for the old layout's duration %s from its renewal at least)",
		span(began.Sub(latestRenew(old))), span(latestAcquire(fresh).Sub(began)), span(latestAcquire(fresh).Sub(latestRenew(old))), shardLeaseDuration))

	// Case 2, found expired: the 4 shards killed in turn, 3 shards started once every Lease of
	// both old layouts is past renewTime + duration + skew (a lease duration), and one second
	// more. (Another count than 2: a Lease of the process's own layout left named is waited
	// for by the ordinary election, a lease duration after first sight, as upstream's
	// candidates do; the layout rule is what this case measures.)
	kill(four)
	fourLeases := layoutLeases(t, c, leaseNS, 4)
	time.Sleep(time.Until(latestRenew(fourLeases).Add(2*shardLeaseDuration + time.Second)))
	again, began := start(3, "again")
	back := layoutLeases(t, c, leaseNS, 3)
	checkAfter(t, "found expired", fourLeases, back, 2*shardLeaseDuration)
	for _, p := range again {
		if !logHas(p, expiredWaitMessage) {
			t.Errorf("%s does not say it skipped the expired Leases (%q):\n%s", p.Name, expiredWaitMessage, p.Tail(20))
		}
	}
	report(t, "sharding expired Lease", "found expired", fmt.Sprintf("3 shards started %s after the 4 shards' last renewal, leading %s after their start (a whole lease duration, %s, before this choice); old renewal to new acquisition %s",
		span(began.Sub(latestRenew(fourLeases))), span(latestAcquire(back).Sub(began)), shardLeaseDuration, span(latestAcquire(back).Sub(latestRenew(fourLeases)))))
	kill(again)
}

// layoutLeases reads the Leases of endpoints-controller's mixed-hash layout of count shards;
// each must name a holder and say when it was acquired and renewed.
func layoutLeases(t *testing.T, c kubernetes.Interface, ns string, count int) []coordinationv1.Lease {
	t.Helper()
	var out []coordinationv1.Lease
	for i := range count {
		name := sharding.Shard{Index: i, Count: count, Hash: sharding.HashMixed}.LeaseName("endpoints-controller")
		l, err := c.CoordinationV1().Leases(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if s := l.Spec; s.HolderIdentity == nil || *s.HolderIdentity == "" || s.RenewTime == nil || s.AcquireTime == nil {
			t.Fatalf("Lease %s: holder, renewTime or acquireTime missing: %+v", name, s)
		}
		out = append(out, *l)
	}
	return out
}

// checkAfter asserts that every Lease of the new layout was acquired after every old holder's
// fence closed (renewTime + renew deadline: no write of the old layout after it), and at
// least wait after the old layout's last renewal (what the rule gives on one clock).
func checkAfter(t *testing.T, what string, old, nu []coordinationv1.Lease, wait time.Duration) {
	t.Helper()
	last := latestRenew(old)
	for _, l := range nu {
		acq := l.Spec.AcquireTime.Time
		if acq.Before(last.Add(shardRenewDeadline)) {
			t.Errorf("%s: %s acquired at %s, before the old layout's fence closed (last renewal %s + %s): two owners", what, l.Name,
				acq.Format(time.StampMicro), last.Format(time.StampMicro), shardRenewDeadline)
		}
		if acq.Before(last.Add(wait)) {
			t.Errorf("%s: %s acquired %s after the old layout's last renewal, want at least %s", what, l.Name, span(acq.Sub(last)), wait)
		}
	}
}

func latestRenew(ls []coordinationv1.Lease) time.Time {
	var t time.Time
	for _, l := range ls {
		t = later(t, l.Spec.RenewTime.Time)
	}
	return t
}

func latestAcquire(ls []coordinationv1.Lease) time.Time {
	var t time.Time
	for _, l := range ls {
		t = later(t, l.Spec.AcquireTime.Time)
	}
	return t
}

// logHas reports whether the process's log holds s.
func logHas(p *testenv.Controller, s string) bool {
	b, err := os.ReadFile(p.Log)
	return err == nil && strings.Contains(string(b), s)
}
