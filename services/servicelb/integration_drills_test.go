package servicelb_test

// Trust under faults (issue 17), on the real apiserver: the pool API failing under the
// controller never clears an address, and two controllers that do not know of each other
// never show one address twice.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/kcm-split/kcm-split/services/servicelb"
	"github.com/kcm-split/kcm-split/services/servicelb/api/v1alpha1"
	"github.com/kcm-split/kcm-split/shared/testenv"
)

// deleteCRD deletes the IPAddressPool CRD (and with it every pool) and waits until it is gone.
func deleteCRD(t *testing.T) {
	t.Helper()
	if err := testenv.DeleteCRD(env.Config, crdName); err != nil {
		t.Fatal(err)
	}
}

// waitUnverified waits until the controller reports want addresses kept that no pool vouches
// for. A pool change queues every Service at once, before any of them is synced: a change of
// the count says that the controller has seen the pool change and queued them all, so that a
// Service created afterwards is synced after them (one worker, the default).
func (f *fixture) waitUnverified(step string, want float64) {
	f.t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		return f.metricSum("kcm_split_servicelb_unverified_addresses") == want, nil
	})
	if err != nil {
		f.t.Fatalf("%s: unverified addresses %v, want %v", step, f.metricSum("kcm_split_servicelb_unverified_addresses"), want)
	}
}

// TestPoolAPIFaults is the "Pool API faults" drill: Services holding addresses keep them,
// with no status write, while the controller starts without the CRD, the CRD comes back, a
// pool is deleted, a pool turns invalid, and the CRD is deleted under the running controller.
// Over 80 lines: one drill of five faults in sequence, each building on the one before.
func TestPoolAPIFaults(t *testing.T) {
	f := setup(t)
	ranges := []string{f.v4(1) + "-" + f.v4(40)}
	f.pool("main", ranges)
	names := []string{"s0", "s1", "s2", "s3", "s4", "s5"}
	before := map[string][]string{}
	for _, n := range names {
		f.service(n)
	}
	for _, n := range names {
		before[n] = ingressIPs(f.waitAddress(n))
	}
	if !f.ctrl.Stop(30 * time.Second) {
		t.Fatal("the controller did not stop")
	}
	deleteCRD(t)
	t.Cleanup(func() { _ = installCRDs(env.Config) })
	base := f.writesTo(names...)
	check := func(step string) {
		t.Helper()
		if n := f.writesTo(names...) - base; n != 0 {
			t.Fatalf("%s: %d writes to Services holding addresses, want 0", step, n)
		}
		for _, n := range names {
			s, err := f.c.CoreV1().Services(f.ns).Get(context.Background(), n, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got := ingressIPs(s); !slices.Equal(got, before[n]) {
				t.Fatalf("%s: %s shows %v, had %v", step, n, got, before[n])
			}
		}
		t.Logf("%s: 0 writes to the %d Services, addresses unchanged", step, len(names))
	}

	// 1. Start without the CRD.
	f.ctrl = env.StartLeading(t, controller, "ctrl-nocrd")
	f.service("sentinel1")
	f.waitEvent("sentinel1", servicelb.ReasonAllocationFailed)
	for _, n := range names {
		f.waitEvent(n, servicelb.ReasonAddressUnverified)
	}
	// Services of other tests whose pools are gone keep theirs unverified too: others.
	v := f.metricSum("kcm_split_servicelb_unverified_addresses")
	if v < float64(len(names)) {
		t.Fatalf("unverified addresses gauge %v, want >= %d", v, len(names))
	}
	others := v - float64(len(names))
	holders := len(names) // Services of this test holding an address
	check("started without the CRD")

	// 2. The CRD comes back with the pool: picked up without a restart; the held
	// addresses are not handed out again.
	start := time.Now()
	if err := installCRDs(env.Config); err != nil {
		t.Fatal(err)
	}
	f.pool("main", ranges)
	got := ingressIPs(f.waitAddress("sentinel1"))
	t.Logf("pool API picked up %s after the CRD was installed", time.Since(start).Round(time.Millisecond))
	holders++
	for n, ips := range before {
		if slices.Equal(got, ips) {
			t.Fatalf("sentinel1 got %v, which %s holds", got, n)
		}
	}
	// Every held address verified again: the Services were synced since the pool came back,
	// in a batch sentinel1 may have been served before; a Service created now is synced
	// after them, writes included.
	f.waitUnverified("CRD installed again", others)
	f.service("marker2")
	f.waitEvent("marker2", servicelb.ReasonEnsuring)
	holders++
	check("CRD installed again")

	// 3. The pool is deleted.
	if err := f.pools.Delete(context.Background(), f.ns+"-main"); err != nil {
		t.Fatal(err)
	}
	// Seen by the controller before sentinel2 exists: else sentinel2 could be served from
	// the pool its cache still has.
	f.waitUnverified("pool deleted", others+float64(holders))
	f.service("sentinel2")
	f.waitEvent("sentinel2", servicelb.ReasonAllocationFailed)
	check("pool deleted")

	// 4. The pool comes back, then an edit makes it invalid.
	p := f.pool("main", ranges)
	f.waitAddress("sentinel2")
	holders++
	// All verified again before the edit, so that the count changing below means the
	// controller has seen the edit.
	f.waitUnverified("pool back", others)
	p, err := f.pools.Get(context.Background(), p.Name)
	if err != nil {
		t.Fatal(err)
	}
	p.Spec.Addresses = []string{f.v4(40) + "-" + f.v4(1)}
	if _, err := f.pools.Update(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	f.waitUnverified("pool invalid", others+float64(holders))
	f.service("sentinel3")
	f.waitEvent("sentinel3", servicelb.ReasonAllocationFailed)
	check("pool invalid")

	// 5. The CRD is deleted under the running controller.
	deleteCRD(t)
	f.service("sentinel4")
	f.waitEvent("sentinel4", servicelb.ReasonAllocationFailed)
	err = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		return f.metricSum("kcm_split_servicelb_unverified_addresses") >= float64(len(names)), nil
	})
	if err != nil {
		t.Fatal("the kept addresses were never reported as unverified")
	}
	check("CRD deleted while running")
	t.Logf("write conflicts: stale %v overwritten %v; unverified addresses %v",
		f.ctrl.Metric(`kcm_split_servicelb_write_conflicts_total{kind="stale"}`),
		f.ctrl.Metric(`kcm_split_servicelb_write_conflicts_total{kind="overwritten"}`),
		f.metricSum("kcm_split_servicelb_unverified_addresses"))
}

// TestSplitBrain runs two controllers with --leader-elect=false on the same pool while
// Services are created and deleted: no address is ever shown by two Services, and every
// Service costs a bounded number of writes.
// Over 80 lines: one drill, each phase checked against the state the previous one left.
func TestSplitBrain(t *testing.T) {
	testenv.Require(t, env)
	if err := installCRDs(env.Config); err != nil { // a drill before may have removed it
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, c: env.Client(t), pools: v1alpha1.NewClient(dyn), ns: env.Namespace(t), block: int(blocks.Add(1))}
	// 1,000 Services, two thirds of them live at the end: four blocks of 254 addresses.
	ranges := []string{f.v4(1) + "-" + f.v4(254)}
	for range 3 {
		b := blocks.Add(1)
		ranges = append(ranges, fmt.Sprintf("10.200.%d.1-10.200.%d.254", b, b))
	}
	f.pool("main", ranges)
	var ctrls []*testenv.Controller
	for _, name := range []string{"split-a", "split-b"} {
		c := env.Start(t, controller, name, "--leader-elect=false")
		ctrls = append(ctrls, c)
	}
	for _, c := range ctrls {
		err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, testenv.LeadTimeout, true, func(context.Context) (bool, error) {
			code, _ := c.Get("/readyz")
			return code == http.StatusOK, nil
		})
		if err != nil {
			t.Fatalf("%s never ready", c.Name)
		}
	}

	checks, maxDup := 0, 0
	checkUnique := func() map[string][]string {
		t.Helper()
		list, err := f.c.CoreV1().Services(f.ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		checks++
		byIP := map[string][]string{}
		for _, s := range list.Items {
			for _, ip := range ingressIPs(&s) {
				byIP[ip] = append(byIP[ip], s.Name)
			}
		}
		for ip, holders := range byIP {
			if len(holders) > 1 {
				maxDup = max(maxDup, len(holders))
				t.Errorf("check %d: %s shown by %v", checks, ip, holders)
			}
		}
		return byIP
	}

	const total = 1000
	rng := rand.New(rand.NewPCG(17, 1))
	var live []string
	deleted := 0
	start := time.Now()
	for i := range total {
		name := fmt.Sprintf("svc-%03d", i)
		f.service(name)
		live = append(live, name)
		if i%3 == 2 {
			j := rng.IntN(len(live))
			f.delete(live[j])
			live = slices.Delete(live, j, j+1)
			deleted++
		}
		if i%20 == 19 {
			checkUnique()
		}
	}
	// Settle: every live Service shows an address.
	err = wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 3*time.Minute, true, func(context.Context) (bool, error) {
		list, err := f.c.CoreV1().Services(f.ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		served := 0
		for _, s := range list.Items {
			if len(s.Status.LoadBalancer.Ingress) > 0 && s.DeletionTimestamp == nil {
				served++
			}
		}
		return served == len(live) && len(list.Items) == len(live), nil
	})
	if err != nil {
		checkUnique()
		t.Fatalf("the live Services were not all served")
	}
	settled := time.Since(start)
	byIP := checkUnique()
	if len(byIP) != len(live) {
		t.Errorf("%d addresses for %d live Services", len(byIP), len(live))
	}

	// Writes per Service, by both controllers together.
	evs, err := env.Writes(testenv.ByUserAgentPrefix(controller.UserAgentPrefix(), "services"))
	if err != nil {
		t.Fatal(err)
	}
	per := map[string]int{}
	conflicts := 0
	for _, e := range evs {
		if e.ObjectRef.Namespace != f.ns {
			continue
		}
		per[e.ObjectRef.Name]++
		if e.ResponseStatus.Code == http.StatusConflict {
			conflicts++
		}
	}
	counts := make([]int, 0, len(per))
	sum := 0
	for _, n := range per {
		counts = append(counts, n)
		sum += n
	}
	sort.Ints(counts)
	claimConflicts := 0.0
	for _, c := range ctrls {
		claimConflicts += c.Metric("kcm_split_servicelb_claim_conflicts_total")
	}
	t.Logf("%d Services created, %d deleted, %d live; %d uniqueness checks, max holders of one address %d; settled in %s",
		total, deleted, len(live), checks, max(maxDup, 1), settled.Round(time.Millisecond))
	t.Logf("Service writes by both controllers: %d total, %.2f per Service, median %d, p99 %d, max %d; %d answered 409; %v claim conflicts",
		sum, float64(sum)/float64(len(per)), counts[len(counts)/2], counts[len(counts)*99/100], counts[len(counts)-1], conflicts, claimConflicts)
	// Each of the two controllers adds the finalizer, writes the status and (when deleted)
	// removes the finalizer at most once per version it sees, and retries a rejected write
	// with backoff: a dozen writes per Service is far above what a well-behaved pair needs.
	const maxWritesPerService = 12
	if counts[len(counts)-1] > maxWritesPerService {
		t.Errorf("a Service got %d writes, want at most %d", counts[len(counts)-1], maxWritesPerService)
	}

	// Leave nothing behind for the tests after this one: every later controller would
	// otherwise restore and serve these hundreds of Services (namespaces are never finalized
	// here), and whatever pool a later test creates could be drained by them. The two
	// controllers still run, so they remove their finalizers and release the claims.
	for _, name := range live {
		f.delete(name)
	}
	err = wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := f.c.CoreV1().Services(f.ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(list.Items) == 0, nil
	})
	if err != nil {
		t.Fatalf("the split-brain Services were not all cleaned up: %v", err)
	}
	if err := f.pools.Delete(context.Background(), f.ns+"-main"); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}
