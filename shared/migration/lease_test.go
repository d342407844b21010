package migration

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	k8stesting "k8s.io/client-go/testing"
)

const ns, name = "kube-system", "kcm-split-migration"

var leasesGVR = coordinationv1.SchemeGroupVersion.WithResource("leases")

// fakeClient is a clientset whose Lease updates are conditioned on resourceVersion like the
// apiserver's (the fake tracker does not check it). conflicts makes that many next updates fail.
func fakeClient(t *testing.T, conflicts *atomic.Int32) *fake.Clientset {
	t.Helper()
	c := fake.NewClientset()
	tracker := c.Tracker()
	c.PrependReactor("create", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		l := a.(k8stesting.CreateAction).GetObject().(*coordinationv1.Lease).DeepCopy()
		l.ResourceVersion = "1"
		if err := tracker.Create(leasesGVR, l, l.Namespace); err != nil {
			return true, nil, err
		}
		return true, l, nil
	})
	c.PrependReactor("update", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		l := a.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease).DeepCopy()
		if conflicts != nil && conflicts.Add(-1) >= 0 {
			return true, nil, apierrors.NewConflict(leasesGVR.GroupResource(), l.Name, errors.New("injected"))
		}
		cur, err := tracker.Get(leasesGVR, l.Namespace, l.Name)
		if err != nil {
			return true, nil, err
		}
		rv := cur.(*coordinationv1.Lease).ResourceVersion
		if l.ResourceVersion != rv {
			return true, nil, apierrors.NewConflict(leasesGVR.GroupResource(), l.Name, errors.New("stale resourceVersion"))
		}
		n, _ := strconv.Atoi(rv)
		l.ResourceVersion = strconv.Itoa(n + 1)
		if err := tracker.Update(leasesGVR, l, l.Namespace); err != nil {
			return true, nil, err
		}
		return true, l, nil
	})
	return c
}

func newMember(c *fake.Clientset, id string) *Member {
	return NewMember(Options{Namespace: ns, Name: name, Identity: id, Binary: "test-controller",
		LeaseDuration: time.Second, RenewDeadline: 600 * time.Millisecond, RetryPeriod: 100 * time.Millisecond}, c.CoordinationV1())
}

func getLease(t *testing.T, c *fake.Clientset) *coordinationv1.Lease {
	t.Helper()
	l, err := c.CoordinationV1().Leases(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// setLease writes the Lease as another party would (kube-controller-manager, an operator).
func setLease(t *testing.T, c *fake.Clientset, edit func(*coordinationv1.Lease)) {
	t.Helper()
	l, err := c.CoordinationV1().Leases(ns).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		edit(l)
		if _, err := c.CoordinationV1().Leases(ns).Create(context.Background(), l, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return
	} else if err != nil {
		t.Fatal(err)
	}
	edit(l)
	if _, err := c.CoordinationV1().Leases(ns).Update(context.Background(), l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func kcmHolds(l *coordinationv1.Lease) {
	l.Spec.HolderIdentity = ptr("kcm-host_1234")
	l.Spec.LeaseDurationSeconds = ptr(int32(1))
	l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
	l.Spec.LeaseTransitions = ptr(int32(3))
}

func wantMembers(t *testing.T, l *coordinationv1.Lease, holder string, ids ...string) {
	t.Helper()
	if got := holderOf(l); got != holder {
		t.Errorf("holder = %q, want %q", got, holder)
	}
	members, readable := membersOf(l)
	if !readable {
		t.Errorf("members annotation unreadable: %q", l.Annotations[AnnotationMembers])
	}
	if len(members) != len(ids) {
		t.Errorf("members = %v, want %v", members, ids)
	}
	for _, id := range ids {
		if _, ok := members[id]; !ok {
			t.Errorf("members = %v, want %s among them", members, id)
		}
	}
}

func TestAcquireFromAbsent(t *testing.T) {
	c := fakeClient(t, nil)
	m := newMember(c, "a")
	if ok, err := m.tryAcquire(context.Background()); !ok || err != nil {
		t.Fatalf("tryAcquire = %v, %v", ok, err)
	}
	if !m.Fresh() {
		t.Error("not fresh after joining")
	}
	l := getLease(t, c)
	wantMembers(t, l, Component, "a")
	if ptrValue(l.Spec.LeaseDurationSeconds) != 1 || l.Spec.AcquireTime == nil {
		t.Errorf("spec = %+v", l.Spec)
	}
}

func TestAcquireFromReleased(t *testing.T) {
	c := fakeClient(t, nil)
	setLease(t, c, func(l *coordinationv1.Lease) {
		kcmHolds(l)
		l.Spec.HolderIdentity = nil
	})
	m := newMember(c, "a")
	if ok, err := m.tryAcquire(context.Background()); !ok || err != nil {
		t.Fatalf("tryAcquire = %v, %v", ok, err)
	}
	l := getLease(t, c)
	wantMembers(t, l, Component, "a")
	if got := ptrValue(l.Spec.LeaseTransitions); got != 4 {
		t.Errorf("leaseTransitions = %d, want 4", got)
	}
}

// A foreign holder that stops renewing is taken over once its Lease has been seen unchanged
// for its duration, not before; one that keeps renewing is never taken.
func TestAcquireFromExpiredNotFromRenewing(t *testing.T) {
	c := fakeClient(t, nil)
	setLease(t, c, kcmHolds)
	m := newMember(c, "a")
	ctx := context.Background()
	// Renewed every 300 ms for 2 s: more than the 1 s duration in all.
	for range 7 {
		if ok, err := m.tryAcquire(ctx); ok || err != nil {
			t.Fatalf("tryAcquire while KCM renews = %v, %v", ok, err)
		}
		time.Sleep(300 * time.Millisecond)
		setLease(t, c, func(l *coordinationv1.Lease) { l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()} })
	}
	if ok, _ := m.tryAcquire(ctx); ok {
		t.Fatal("took a Lease renewed just now")
	}
	start := time.Now()
	if err := m.Acquire(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < time.Second {
		t.Errorf("took the Lease %s after its last renewal, before its 1s duration", waited)
	}
	wantMembers(t, getLease(t, c), Component, "a")
}

func TestTwoMembersLastOutReleases(t *testing.T) {
	c := fakeClient(t, nil)
	a, b := newMember(c, "a"), newMember(c, "b")
	ctx := context.Background()
	for _, m := range []*Member{a, b} {
		if ok, err := m.tryAcquire(ctx); !ok || err != nil {
			t.Fatalf("tryAcquire = %v, %v", ok, err)
		}
	}
	wantMembers(t, getLease(t, c), Component, "a", "b")
	if err := a.renew(ctx); err != nil {
		t.Fatal(err)
	}
	// Not the last one out: the Lease stays held.
	if err := a.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	wantMembers(t, getLease(t, c), Component, "b")
	if a.Fresh() || !b.Fresh() {
		t.Errorf("fresh: a=%v b=%v", a.Fresh(), b.Fresh())
	}
	if err := b.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	l := getLease(t, c)
	wantMembers(t, l, "")
	if ptrValue(l.Spec.LeaseDurationSeconds) != 1 {
		t.Errorf("released with leaseDurationSeconds %d", ptrValue(l.Spec.LeaseDurationSeconds))
	}
}

// A member that died without leaving keeps nobody from releasing once its entry has been seen
// unrenewed for a lease duration.
func TestDeadMemberPrunedAndLastOutReleases(t *testing.T) {
	c := fakeClient(t, nil)
	a, dead := newMember(c, "a"), newMember(c, "dead")
	ctx := context.Background()
	for _, m := range []*Member{dead, a} {
		if ok, err := m.tryAcquire(ctx); !ok || err != nil {
			t.Fatalf("tryAcquire = %v, %v", ok, err)
		}
	}
	// Within the lease duration the dead member counts as live: leaving keeps the Lease held.
	b := newMember(c, "b")
	if ok, err := b.tryAcquire(ctx); !ok || err != nil {
		t.Fatalf("tryAcquire = %v, %v", ok, err)
	}
	if err := b.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	wantMembers(t, getLease(t, c), Component, "a", "dead")
	for range 12 {
		time.Sleep(100 * time.Millisecond)
		if err := a.renew(ctx); err != nil {
			t.Fatal(err)
		}
	}
	wantMembers(t, getLease(t, c), Component, "a")
	if err := a.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	wantMembers(t, getLease(t, c), "")
}

func TestHandBack(t *testing.T) {
	c := fakeClient(t, nil)
	a, b := newMember(c, "a"), newMember(c, "b")
	ctx := context.Background()
	for _, m := range []*Member{a, b} {
		if err := m.Acquire(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
	setLease(t, c, func(l *coordinationv1.Lease) { l.Annotations[AnnotationHandBack] = "true" })
	for _, m := range []*Member{a, b} {
		if err := m.Hold(ctx); !errors.Is(err, ErrHandBack) {
			t.Fatalf("Hold = %v, want ErrHandBack", err)
		}
		if m.Fresh() || !m.HandingBack() {
			t.Errorf("fresh=%v handingBack=%v after the hand-back", m.Fresh(), m.HandingBack())
		}
	}
	if err := a.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	wantMembers(t, getLease(t, c), Component, "b")
	// Nobody joins while the hand-back is set.
	if ok, err := a.tryAcquire(ctx); ok || err != nil {
		t.Fatalf("tryAcquire during hand-back = %v, %v", ok, err)
	}
	if err := b.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	l := getLease(t, c)
	wantMembers(t, l, "")
	if _, ok := l.Annotations[AnnotationHandBack]; !ok {
		t.Error("the release dropped the operator's hand-back annotation")
	}
	// KCM takes it; removing the annotation lets the group wait for KCM again.
	setLease(t, c, func(l *coordinationv1.Lease) { kcmHolds(l); delete(l.Annotations, AnnotationHandBack) })
	if ok, err := a.tryAcquire(ctx); ok || err != nil || a.HandingBack() {
		t.Fatalf("tryAcquire with KCM holding = %v, %v (handingBack %v)", ok, err, a.HandingBack())
	}
}

func TestTakenEndsMembership(t *testing.T) {
	c := fakeClient(t, nil)
	a := newMember(c, "a")
	ctx := context.Background()
	if err := a.Acquire(ctx, nil); err != nil {
		t.Fatal(err)
	}
	setLease(t, c, kcmHolds)
	if err := a.Hold(ctx); !errors.Is(err, ErrTaken) {
		t.Fatalf("Hold = %v, want ErrTaken", err)
	}
	// Leaving does not touch a Lease another component holds.
	if err := a.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	if got := holderOf(getLease(t, c)); got != "kcm-host_1234" {
		t.Errorf("holder = %q after leaving", got)
	}
}

func TestConflictsRetriedBoundedly(t *testing.T) {
	var conflicts atomic.Int32
	c := fakeClient(t, &conflicts)
	a := newMember(c, "a")
	ctx := context.Background()
	if err := a.Acquire(ctx, nil); err != nil {
		t.Fatal(err)
	}
	conflicts.Store(maxConflicts - 1)
	if err := a.renew(ctx); err != nil {
		t.Fatalf("renew after %d conflicts: %v", maxConflicts-1, err)
	}
	conflicts.Store(100)
	if err := a.renew(ctx); !apierrors.IsConflict(err) {
		t.Fatalf("renew under endless conflicts = %v, want a conflict", err)
	}
	if got := 100 - conflicts.Load(); got != maxConflicts {
		t.Errorf("%d updates under endless conflicts, want %d", got, maxConflicts)
	}
	// Renewals failing for the renew deadline end the membership.
	if err := a.Hold(ctx); !errors.Is(err, ErrStale) {
		t.Fatalf("Hold = %v, want ErrStale", err)
	}
	if a.Fresh() {
		t.Error("fresh after ErrStale")
	}
}

func TestRemovedEndsMembership(t *testing.T) {
	c := fakeClient(t, nil)
	a, b := newMember(c, "a"), newMember(c, "b")
	ctx := context.Background()
	for _, m := range []*Member{a, b} {
		if err := m.Acquire(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
	setLease(t, c, func(l *coordinationv1.Lease) {
		members, _ := membersOf(l)
		delete(members, "a")
		_ = setMembers(l, members)
	})
	if err := a.Hold(ctx); !errors.Is(err, ErrRemoved) {
		t.Fatalf("Hold = %v, want ErrRemoved", err)
	}
}

// Members may run with different timings (a rollout changing them): the Lease declares the
// longest lease duration, and a member with a longer one counts as live for all of it, so a
// shorter-lived member leaving does not release the Lease under it.
func TestMixedTimingsLongestWins(t *testing.T) {
	c := fakeClient(t, nil)
	ctx := context.Background()
	long := NewMember(Options{Namespace: ns, Name: name, Identity: "long", Binary: "test-controller",
		LeaseDuration: 2500 * time.Millisecond, RenewDeadline: 2 * time.Second, RetryPeriod: 100 * time.Millisecond}, c.CoordinationV1())
	short := newMember(c, "short")
	for _, m := range []*Member{long, short} {
		if ok, err := m.tryAcquire(ctx); !ok || err != nil {
			t.Fatalf("tryAcquire = %v, %v", ok, err)
		}
	}
	if got := ptrValue(getLease(t, c).Spec.LeaseDurationSeconds); got != 3 {
		t.Fatalf("leaseDurationSeconds = %d, want 3 (2.5 s rounded up, the longest)", got)
	}
	if err := short.renew(ctx); err != nil {
		t.Fatal(err)
	}
	if got := ptrValue(getLease(t, c).Spec.LeaseDurationSeconds); got != 3 {
		t.Fatalf("a renewal by the shorter member wrote leaseDurationSeconds %d, want 3", got)
	}
	// Past the short member's own lease duration (1 s) but within the long one's: still live.
	time.Sleep(1500 * time.Millisecond)
	if err := short.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	wantMembers(t, getLease(t, c), Component, "long")
}

// An unreadable members list (a hand edit) is unknown, not empty: nobody joins, renews or
// releases the group's Lease on it.
func TestUnreadableMembersWritesNothing(t *testing.T) {
	c := fakeClient(t, nil)
	ctx := context.Background()
	a := newMember(c, "a")
	if ok, err := a.tryAcquire(ctx); !ok || err != nil {
		t.Fatalf("tryAcquire = %v, %v", ok, err)
	}
	setLease(t, c, func(l *coordinationv1.Lease) { l.Annotations[AnnotationMembers] = "{garbled" })
	before := getLease(t, c).ResourceVersion
	b := newMember(c, "b")
	if ok, err := b.tryAcquire(ctx); ok || !errors.Is(err, ErrUnreadableMembers) {
		t.Fatalf("join = %v, %v; want ErrUnreadableMembers", ok, err)
	}
	if err := a.renew(ctx); !errors.Is(err, ErrUnreadableMembers) {
		t.Fatalf("renew = %v, want ErrUnreadableMembers", err)
	}
	if err := a.Leave(ctx); !errors.Is(err, ErrUnreadableMembers) {
		t.Fatalf("Leave = %v, want ErrUnreadableMembers", err)
	}
	l := getLease(t, c)
	if l.ResourceVersion != before || holderOf(l) != Component {
		t.Fatalf("the Lease was written (holder %q, resourceVersion %s -> %s)", holderOf(l), before, l.ResourceVersion)
	}
}

// hangingLeases makes Lease updates block until their context ends, recording its deadline.
type hangingLeases struct {
	coordinationclient.LeasesGetter
	deadlines chan time.Time
}

func (h hangingLeases) Leases(namespace string) coordinationclient.LeaseInterface {
	return hangingLease{h.LeasesGetter.Leases(namespace), h.deadlines}
}

type hangingLease struct {
	coordinationclient.LeaseInterface
	deadlines chan time.Time
}

func (h hangingLease) Update(ctx context.Context, l *coordinationv1.Lease, _ metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	d, _ := ctx.Deadline()
	h.deadlines <- d
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestHungRenewalBoundedByFreshness: a renewal whose update hangs is cut off when the
// membership stops being fresh, so the controllers stop then, not a call timeout later.
func TestHungRenewalBoundedByFreshness(t *testing.T) {
	c := fakeClient(t, nil)
	a := newMember(c, "a")
	ctx := context.Background()
	if err := a.Acquire(ctx, nil); err != nil {
		t.Fatal(err)
	}
	deadlines := make(chan time.Time, 10)
	a.leases = hangingLeases{c.CoordinationV1(), deadlines}
	a.mu.Lock()
	fresh := a.renewedAt.Add(a.opts.RenewDeadline)
	a.mu.Unlock()
	if err := a.Hold(ctx); !errors.Is(err, ErrStale) {
		t.Fatalf("Hold = %v, want ErrStale", err)
	}
	close(deadlines)
	n := 0
	for d := range deadlines {
		n++
		if d.IsZero() || d.After(fresh) {
			t.Errorf("an update's deadline %v is after the membership's freshness %v", d, fresh)
		}
	}
	if n == 0 {
		t.Error("no renewal was attempted")
	}
}
