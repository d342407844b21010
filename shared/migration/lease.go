package migration

// Hand-written: client-go's leaderelection elects one unique holder per Lease, and kcm-split's
// binaries must hold the migration Lease together, as one holder with several members.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/klog/v2"
)

// Annotations of the migration Lease.
const (
	// AnnotationMembers lists the group's members while kcm-split holds the Lease: a JSON
	// object from each member's identity to {"binary": <binary ID>, "renewTime": <RFC 3339>}.
	AnnotationMembers = "migration.kcm-split.io/members"
	// AnnotationHandBack, set by an operator with any value, hands the Lease back: every
	// member stops its migrated controllers and leaves, none joins while it is set, and the
	// last one out releases the Lease.
	AnnotationHandBack = "migration.kcm-split.io/hand-back"
)

// Why a membership ended, as Hold returns it.
var (
	ErrHandBack = errors.New("the migration Lease is being handed back (" + AnnotationHandBack + ")")
	ErrStale    = errors.New("membership not renewed within the renew deadline")
	ErrRemoved  = errors.New("no longer listed as a member")
	ErrTaken    = errors.New("the migration Lease is held by another component")
	// ErrUnreadableMembers: the members annotation of the group's Lease cannot be read, so
	// nothing is written (see modify).
	ErrUnreadableMembers = errors.New("the members annotation (" + AnnotationMembers + ") cannot be read: not joining, renewing or releasing")
)

// maxConflicts bounds the immediate retries of one read-modify-write that lost a race with
// another member's write; the next periodic attempt starts afresh.
const maxConflicts = 4

// Options are a member's settings: its main Lease's timings apply to the migration Lease too.
type Options struct {
	Namespace string
	// Name is the migration Lease's name (the configuration's leaderName).
	Name string
	// Identity is this process's member key: its main Lease identity, unique per process.
	Identity string
	// Binary is recorded in the member entry, for people reading the Lease.
	Binary        string
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
}

// memberEntry is one member's record in AnnotationMembers.
type memberEntry struct {
	Binary    string    `json:"binary,omitempty"`
	RenewTime time.Time `json:"renewTime"`
	// LeaseDurationSeconds is the member's --leader-elect-lease-duration, rounded up. Members
	// may run with different timings (a rollout that changes them): the Lease declares the
	// longest, and an entry counts as live for at least its own duration, so that no member's
	// renew deadline outlasts what another component or member waits for.
	LeaseDurationSeconds int32 `json:"leaseDurationSeconds,omitempty"`
}

// holding identifies one renewal of the Lease's holder: unchanged for the Lease's duration
// (by the local clock, since it was first seen) means expired, as client-go decides.
type holding struct {
	holder      string
	renew       time.Time
	acquire     time.Time
	transitions int32
	duration    time.Duration
}

type seenEntry struct {
	entry memberEntry
	at    time.Time
}

// Member is this process's membership in the group holding the migration Lease. Every write
// is conditioned on the resourceVersion just read, and every request is bounded by half the
// renew deadline.
type Member struct {
	opts   Options
	leases coordinationclient.LeasesGetter

	mu sync.Mutex
	// renewedAt is when the last successful join or renewal was sent (monotonic clock).
	renewedAt time.Time
	member    bool
	handBack  bool
	seen      holding
	seenAt    time.Time
	entries   map[string]seenEntry
}

// NewMember returns a Member that is not in the group yet. leases must not be fenced.
func NewMember(opts Options, leases coordinationclient.LeasesGetter) *Member {
	return &Member{opts: opts, leases: leases, entries: map[string]seenEntry{}}
}

// Fresh reports whether this process may write as the migrated controllers' owner now: it is
// a member, sent its last successful renewal less than the renew deadline ago, and has not
// seen a hand-back. The Lease cannot have been taken by another component earlier than a lease
// duration after that renewal.
func (m *Member) Fresh() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.member && !m.handBack && time.Since(m.renewedAt) < m.opts.RenewDeadline
}

// HandingBack reports whether the Lease last read carried AnnotationHandBack.
func (m *Member) HandingBack() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.handBack
}

// Acquire blocks until this process has joined the group (nil) or ctx ends (ctx's error).
// It tries at once, then every retry period (jittered). observed is called after each read
// with whether a hand-back is under way.
func (m *Member) Acquire(ctx context.Context, observed func(handBack bool)) error {
	logger := klog.FromContext(ctx)
	for {
		joined, err := m.tryAcquire(ctx)
		if observed != nil {
			observed(m.HandingBack())
		}
		if joined {
			return nil
		}
		if err != nil && ctx.Err() == nil {
			logger.V(2).Info("Could not join the migration Lease's group", "lease", m.lease(), "err", err)
		}
		if err := Sleep(ctx, jitter(m.opts.RetryPeriod)); err != nil {
			return err
		}
	}
}

// Hold renews the membership every retry period until ctx ends (nil) or the membership ends:
// ErrHandBack, ErrTaken, ErrRemoved, or ErrStale once no renewal succeeded for the renew deadline.
func (m *Member) Hold(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	for {
		if err := Sleep(ctx, jitter(m.opts.RetryPeriod)); err != nil {
			return nil
		}
		// A renewal cannot outlive the membership's freshness: a hung call would otherwise keep
		// the controllers running (their writes already fenced) past the renew deadline.
		m.mu.Lock()
		deadline := m.renewedAt.Add(m.opts.RenewDeadline)
		m.mu.Unlock()
		renewCtx, cancel := context.WithDeadline(ctx, deadline)
		err := m.renew(renewCtx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, ErrHandBack), errors.Is(err, ErrTaken), errors.Is(err, ErrRemoved):
			m.lose()
			return err
		case err != nil:
			logger.V(2).Info("Could not renew the migration Lease membership", "lease", m.lease(), "err", err)
		}
		m.mu.Lock()
		stale := time.Since(m.renewedAt) >= m.opts.RenewDeadline
		m.mu.Unlock()
		if stale {
			m.lose()
			return ErrStale
		}
	}
}

// Leave removes this process from the group; when no other member is live (its entry changed
// within a lease duration, by this process's observation) it also releases the Lease, so that
// kube-controller-manager takes it at its next try. It gives up after the renew deadline:
// the entry then goes stale and the Lease expires by itself.
func (m *Member) Leave(ctx context.Context) error {
	m.lose()
	ctx, cancel := context.WithTimeout(ctx, m.opts.RenewDeadline)
	defer cancel()
	var err error
	for attempt := 0; ; attempt++ {
		err = m.modify(ctx, func(l *coordinationv1.Lease, members map[string]memberEntry) (bool, error) {
			if holderOf(l) != Component {
				return false, nil
			}
			if _, ok := members[m.opts.Identity]; !ok {
				return false, nil
			}
			delete(members, m.opts.Identity)
			if m.anyLive(members) {
				return true, nil
			}
			clear(members)
			l.Spec.HolderIdentity = nil
			l.Spec.LeaseDurationSeconds = ptr(int32(1))
			l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
			return true, nil
		})
		if err == nil || ctx.Err() != nil {
			return err
		}
		if Sleep(ctx, backoff(attempt)) != nil {
			return err
		}
	}
}

func (m *Member) lose() {
	m.mu.Lock()
	m.member = false
	m.mu.Unlock()
}

func (m *Member) lease() string { return m.opts.Namespace + "/" + m.opts.Name }

// tryAcquire makes one attempt to join: create the Lease, join the group holding it, or take
// it once released or expired. It reports false without error while another component holds
// the Lease or a hand-back is under way.
func (m *Member) tryAcquire(ctx context.Context) (bool, error) {
	joined := false
	err := m.modify(ctx, func(l *coordinationv1.Lease, members map[string]memberEntry) (bool, error) {
		if m.HandingBack() {
			return false, nil
		}
		now := time.Now()
		switch holder := holderOf(l); {
		case holder == Component:
			m.prune(members)
		case holder == "" || m.expired(l):
			clear(members)
			l.Spec.HolderIdentity = ptr(Component)
			l.Spec.AcquireTime = &metav1.MicroTime{Time: now}
			l.Spec.LeaseTransitions = ptr(ptrValue(l.Spec.LeaseTransitions) + 1)
		default:
			return false, nil
		}
		members[m.opts.Identity] = m.entry(now)
		l.Spec.LeaseDurationSeconds = ptr(longestDuration(members))
		l.Spec.RenewTime = &metav1.MicroTime{Time: now}
		joined = true
		return true, nil
	})
	return joined && err == nil, err
}

// renew refreshes this member's entry and the Lease's renewTime.
func (m *Member) renew(ctx context.Context) error {
	return m.modify(ctx, func(l *coordinationv1.Lease, members map[string]memberEntry) (bool, error) {
		if m.HandingBack() {
			return false, ErrHandBack
		}
		if holder := holderOf(l); holder != Component {
			return false, fmt.Errorf("%w: %q", ErrTaken, holder)
		}
		if _, ok := members[m.opts.Identity]; !ok {
			return false, ErrRemoved
		}
		now := time.Now()
		m.prune(members)
		members[m.opts.Identity] = m.entry(now)
		l.Spec.LeaseDurationSeconds = ptr(longestDuration(members))
		l.Spec.RenewTime = &metav1.MicroTime{Time: now}
		return true, nil
	})
}

// modify reads the Lease, lets change edit it (and its members), and writes it back when
// change says so, conditioned on the resourceVersion read; a lost race is retried at once a
// few times. An absent Lease is created with change's result. A successful write of a Lease
// listing this process makes it a member, fresh from when the write was sent.
func (m *Member) modify(ctx context.Context, change func(*coordinationv1.Lease, map[string]memberEntry) (bool, error)) error {
	for attempt := 0; ; attempt++ {
		l, err := m.get(ctx)
		create := apierrors.IsNotFound(err)
		if create {
			l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: m.opts.Namespace, Name: m.opts.Name}}
		} else if err != nil {
			return err
		}
		m.observe(l)
		members, readable := membersOf(l)
		if !readable && holderOf(l) == Component {
			// Who else is a fresh member is unknown: neither join, renew nor release. Renewals
			// stop, so members go stale and stop writing, and the Lease then expires by itself.
			return ErrUnreadableMembers
		}
		write, err := change(l, members)
		if err != nil || !write {
			return err
		}
		if err := setMembers(l, members); err != nil {
			return err
		}
		sent := time.Now()
		written, err := m.write(ctx, l, create)
		if err == nil {
			m.observe(written)
			now, _ := membersOf(written)
			_, listed := now[m.opts.Identity]
			m.mu.Lock()
			if listed && holderOf(written) == Component {
				m.member = true
				if sent.After(m.renewedAt) {
					m.renewedAt = sent
				}
			}
			m.mu.Unlock()
			return nil
		}
		if !(apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)) || attempt+1 >= maxConflicts {
			return err
		}
		if err := Sleep(ctx, backoff(attempt)); err != nil {
			return err
		}
	}
}

func (m *Member) get(ctx context.Context) (*coordinationv1.Lease, error) {
	ctx, cancel := context.WithTimeout(ctx, m.opts.RenewDeadline/2)
	defer cancel()
	return m.leases.Leases(m.opts.Namespace).Get(ctx, m.opts.Name, metav1.GetOptions{})
}

func (m *Member) write(ctx context.Context, l *coordinationv1.Lease, create bool) (*coordinationv1.Lease, error) {
	ctx, cancel := context.WithTimeout(ctx, m.opts.RenewDeadline/2)
	defer cancel()
	if create {
		return m.leases.Leases(m.opts.Namespace).Create(ctx, l, metav1.CreateOptions{})
	}
	return m.leases.Leases(m.opts.Namespace).Update(ctx, l, metav1.UpdateOptions{})
}

// observe records what a read or write showed: the hand-back annotation, the holder's renewal
// and each member entry, each with the local time it was first seen unchanged.
func (m *Member) observe(l *coordinationv1.Lease) {
	now := time.Now()
	h := holding{holder: holderOf(l), transitions: ptrValue(l.Spec.LeaseTransitions),
		duration: time.Duration(ptrValue(l.Spec.LeaseDurationSeconds)) * time.Second}
	if l.Spec.RenewTime != nil {
		h.renew = l.Spec.RenewTime.Time
	}
	if l.Spec.AcquireTime != nil {
		h.acquire = l.Spec.AcquireTime.Time
	}
	members, _ := membersOf(l)
	m.mu.Lock()
	defer m.mu.Unlock()
	_, m.handBack = l.Annotations[AnnotationHandBack]
	if !h.renew.Equal(m.seen.renew) || h.holder != m.seen.holder || !h.acquire.Equal(m.seen.acquire) ||
		h.transitions != m.seen.transitions || h.duration != m.seen.duration || m.seenAt.IsZero() {
		m.seen, m.seenAt = h, now
	}
	for id, e := range members {
		if s, ok := m.entries[id]; !ok || !s.entry.RenewTime.Equal(e.RenewTime) {
			m.entries[id] = seenEntry{entry: e, at: now}
		}
	}
	maps.DeleteFunc(m.entries, func(id string, _ seenEntry) bool { _, ok := members[id]; return !ok })
}

// expired reports whether the Lease's holder has not renewed for its duration by this
// process's observation.
func (m *Member) expired(l *coordinationv1.Lease) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := m.seen.duration
	if d <= 0 {
		d = m.opts.LeaseDuration
	}
	return m.seen.holder == holderOf(l) && !m.seenAt.IsZero() && time.Since(m.seenAt) > d
}

// live reports whether another member's entry changed within a lease duration, as this
// process has observed it. An entry not observed yet counts as live.
func (m *Member) live(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.entries[id]
	return !ok || time.Since(s.at) <= max(m.opts.LeaseDuration, time.Duration(s.entry.LeaseDurationSeconds)*time.Second)
}

// entry is this member's entry, renewed at now.
func (m *Member) entry(now time.Time) memberEntry {
	return memberEntry{Binary: m.opts.Binary, RenewTime: now, LeaseDurationSeconds: seconds(m.opts.LeaseDuration)}
}

// seconds rounds d up to whole seconds (at least 1): a Lease must never declare less than its
// holder waits.
func seconds(d time.Duration) int32 {
	return max(1, int32((d+time.Second-1)/time.Second))
}

// longestDuration is the longest lease duration the members declare: what the Lease says.
func longestDuration(members map[string]memberEntry) int32 {
	var d int32 = 1
	for _, e := range members {
		d = max(d, e.LeaseDurationSeconds)
	}
	return d
}

func (m *Member) anyLive(members map[string]memberEntry) bool {
	for id := range members {
		if id != m.opts.Identity && m.live(id) {
			return true
		}
	}
	return false
}

// prune drops the entries of members seen unrenewed for a lease duration: they stopped
// without leaving, and would otherwise keep the last member from releasing the Lease.
func (m *Member) prune(members map[string]memberEntry) {
	for id := range members {
		if id != m.opts.Identity && !m.live(id) {
			delete(members, id)
		}
	}
}

func holderOf(l *coordinationv1.Lease) string { return ptrValue(l.Spec.HolderIdentity) }

// membersOf reads the members annotation; readable is false when it cannot be read (a hand
// edit), and the list is then empty.
func membersOf(l *coordinationv1.Lease) (members map[string]memberEntry, readable bool) {
	members = map[string]memberEntry{}
	raw, ok := l.Annotations[AnnotationMembers]
	if !ok {
		return members, true
	}
	if err := json.Unmarshal([]byte(raw), &members); err != nil {
		return map[string]memberEntry{}, false
	}
	return members, true
}

func setMembers(l *coordinationv1.Lease, members map[string]memberEntry) error {
	if len(members) == 0 {
		delete(l.Annotations, AnnotationMembers)
		return nil
	}
	raw, err := json.Marshal(members)
	if err != nil {
		return err
	}
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[AnnotationMembers] = string(raw)
	return nil
}

func ptr[T any](v T) *T { return &v }

func ptrValue[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// jitter spreads periodic attempts like client-go's (up to 1.2 x the period).
func jitter(d time.Duration) time.Duration {
	return d + time.Duration(rand.Int64N(int64(d)/5+1))
}

// backoff is the pause before retrying a lost race: 20 ms doubling, jittered.
func backoff(attempt int) time.Duration {
	d := 20 * time.Millisecond << attempt
	return d/2 + time.Duration(rand.Int64N(int64(d)))
}

// Sleep waits for d, or less if ctx ends first, and then returns ctx's error.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
