// Assignment: which addresses a Service holds, decided in one step under the state's lock
// from its status, its requests, the pools and the allocator.

package allocation

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	"github.com/kcm-split/kcm-split/services/servicelb/addrpool"
	"github.com/kcm-split/kcm-split/services/servicelb/poolsource"
)

// Assignment is what Assign decided for one Service.
type Assignment struct {
	Ingress       []v1.LoadBalancerIngress
	Moved         []Move
	Freed         []netip.Addr // released for a verified reason; nobody holds them any more
	Unverified    map[netip.Addr]string
	NewUnverified bool
	BadInput      error
	NewBadInput   bool // BadInput differs from what was last reported
	PendingWhy    error
	NewlyPending  bool
	// WaitReason is the reason of PendingWhy (a Wait* constant).
	WaitReason string
	// Effects are the queue adds and gauges that follow, for after the lock.
	Effects Effects
}

// Move is an address given up for a verified reason.
type Move struct {
	From netip.Addr
	Why  string
}

// Describe lists the addresses of the assignment for messages.
func (a Assignment) Describe() string {
	var ips []string
	for _, in := range a.Ingress {
		ips = append(ips, in.IP)
	}
	if len(ips) == 0 {
		return "no address"
	}
	return strings.Join(ips, ", ")
}

// Inputs are what Assign needs to know besides the Service, read before the lock: the
// labels of its namespace, and whether the pools can be trusted (their API is served and
// their cache synced).
type Inputs struct {
	NSLabels labels.Set
	Known    bool
}

// decision is one Assign in progress; its methods expect the state's lock held.
type decision struct {
	s          *State
	key        string
	svc        *v1.Service
	in         Inputs
	fams       []addrpool.Family
	need       int
	props      addrpool.Props
	requested  map[addrpool.Family]netip.Addr
	reqErr     error
	candidates []string
	poolErr    error
	// kept are the addresses the Service holds so far, by family; unverified those of them
	// kept without a pool vouching for them, with the reason.
	kept       map[addrpool.Family]netip.Addr
	unverified map[netip.Addr]string
	failures   []error
	freedAny   bool
	plan       Assignment
}

// Assign decides, in one locked step, which addresses the Service holds: it takes over
// adopt, keeps what is valid or cannot be judged, releases what it has a verified reason
// to release, and allocates what is missing. The addresses chosen are claimed afterwards,
// outside the lock.
func (s *State) Assign(logger klog.Logger, key string, svc *v1.Service, adopt []netip.Addr, in Inputs) Assignment {
	d := &decision{s: s, key: key, svc: svc, in: in, props: PropsOf(svc)}
	d.fams, d.need = families(svc)

	s.mu.Lock()
	defer s.mu.Unlock()
	wasPending := s.pending[key]
	d.readRequest()
	d.adopt(logger, adopt)
	d.keepValid()
	prev := maps.Clone(d.kept)
	d.allocateMissing()
	d.settle(wasPending, prev)
	logger.V(4).Info("Assigned", "addresses", d.plan.Describe(), "pending", s.pending[key])
	return d.plan
}

// readRequest reads what the Service asks for and the pools it may use, and records a new
// invalid request once.
func (d *decision) readRequest() {
	s := d.s
	d.requested, d.reqErr = requestedIPs(d.svc, d.fams, s.apis)
	if d.in.Known {
		d.candidates, d.poolErr = candidatePools(s.pools, d.svc, d.in.NSLabels, s.apis)
	}
	d.plan.BadInput = errors.Join(d.reqErr, d.poolErr)
	if d.plan.BadInput == nil {
		delete(s.badInput, d.key)
	} else if msg := d.plan.BadInput.Error(); s.badInput[d.key] != msg {
		s.badInput[d.key] = msg
		d.plan.NewBadInput = true
	}
}

// free releases a from the Service for a verified reason.
func (d *decision) free(a netip.Addr) {
	if d.s.alloc.ReleaseAddr(d.key, a) {
		d.freedAny = true
		d.plan.Freed = append(d.plan.Freed, a)
		d.s.forgetAddr(a)
	}
}

// adopt takes over what another writer showed and claimed for this Service, dropping our
// own unpublished choice of that family.
func (d *decision) adopt(logger klog.Logger, adopt []netip.Addr) {
	s := d.s
	for _, a := range adopt {
		s.alloc.ReleaseAddr(takenKey(a), a)
		for _, h := range s.alloc.Assigned(d.key) {
			if h != a && addrpool.FamilyOf(h) == addrpool.FamilyOf(a) {
				d.free(h)
			}
		}
		if err := s.alloc.Claim(d.key, a, d.props); err != nil {
			logger.V(2).Info("Cannot take over the address in the status", "address", a, "err", err)
		}
	}
}

// keepValid keeps what the Service holds that is valid or cannot be judged now, and
// releases the rest as moved.
func (d *decision) keepValid() {
	s := d.s
	d.kept = map[addrpool.Family]netip.Addr{}
	d.unverified = map[netip.Addr]string{}
	for _, a := range s.alloc.Assigned(d.key) {
		why, release := s.keepOrRelease(d.svc, a, d.fams, d.requested, d.reqErr, d.candidates, d.in.Known, d.in.NSLabels)
		if !release {
			if err := s.alloc.Claim(d.key, a, d.props); err != nil {
				why, release = err.Error(), true
			}
		}
		if release {
			d.free(a)
			d.plan.Moved = append(d.plan.Moved, Move{From: a, Why: why})
			continue
		}
		if why != "" {
			d.unverified[a] = why
		}
		d.kept[addrpool.FamilyOf(a)] = a
	}
}

// onePoolAPI reports whether key is a pool of an API whose pools give all of a Service's
// addresses (MetalLB's: its speaker announces an address only when every address of the
// Service is in one of its pools).
func onePoolAPI(key string) bool {
	api, _ := poolsource.APIOf(key)
	return api.OnePool
}

// allocateMissing allocates the families the Service does not hold yet: the addresses it
// requests, then any from its candidate pools.
func (d *decision) allocateMissing() {
	s := d.s
	// onePool is the pool of an OnePool API the Service holds an address of: only it may
	// give more.
	onePool := ""
	for _, a := range d.kept {
		if p := s.origin[a]; onePoolAPI(p) {
			onePool = p
		}
	}
	var missing []addrpool.Family
	for _, f := range d.fams {
		if _, ok := d.kept[f]; !ok {
			missing = append(missing, f)
		}
	}
	switch {
	case len(missing) == 0:
	case !d.in.Known:
		firstReason(&d.plan.WaitReason, WaitPoolAPIUnavailable)
		for _, f := range missing {
			d.failures = append(d.failures, fmt.Errorf("%s: the IPAddressPool API is not available or not synced yet", f))
		}
		missing = nil
	case d.reqErr != nil || d.poolErr != nil:
		if d.reqErr == nil {
			firstReason(&d.plan.WaitReason, WaitNoMatchingPool)
		}
		firstReason(&d.plan.WaitReason, WaitInvalidRequest)
		for _, f := range missing {
			d.failures = append(d.failures, fmt.Errorf("%s: the Service's request is invalid", f))
		}
		missing = nil
	}
	var auto []addrpool.Family
	for _, f := range missing {
		want, ok := d.requested[f]
		if !ok {
			auto = append(auto, f)
			continue
		}
		onePool = d.allocateRequested(f, want, onePool)
	}
	if len(auto) > 0 {
		if len(d.candidates) == 0 {
			firstReason(&d.plan.WaitReason, WaitNoMatchingPool)
		}
		firstReason(&d.plan.WaitReason, WaitPoolExhausted)
		d.failures = append(d.failures, s.allocateAuto(d.key, auto, d.need-len(d.kept), d.candidates, onePool, len(d.kept) > 0, d.props, d.kept)...)
	}
}

// allocateRequested takes want, the address the Service requests for family f, when a pool
// it may use contains it; it returns onePool, updated.
func (d *decision) allocateRequested(f addrpool.Family, want netip.Addr, onePool string) string {
	s := d.s
	pools := s.admittingPoolsContaining(d.svc, want, d.in.NSLabels)
	named, _ := namedPool(d.svc, s.apis)
	if named != "" {
		pools = slices.DeleteFunc(pools, func(p string) bool { return p != named })
	}
	if len(pools) == 0 {
		firstReason(&d.plan.WaitReason, WaitRequestedIPNotInPool)
		if named != "" {
			d.failures = append(d.failures, fmt.Errorf("%s is not in pool %s named by the Service, or that pool does not admit it", want, named))
		} else {
			d.failures = append(d.failures, fmt.Errorf("%s is in no pool this Service may use", want))
		}
		return onePool
	}
	if onePool != "" && pools[0] != onePool || onePool == "" && len(d.kept) > 0 && onePoolAPI(pools[0]) {
		firstReason(&d.plan.WaitReason, WaitRequestedIPNotInPool)
		d.failures = append(d.failures, fmt.Errorf("%s is in pool %s, not in the pool of the Service's other address: MetalLB announces only a Service whose addresses are all in one pool", want, pools[0]))
		return onePool
	}
	if err := s.alloc.Claim(d.key, want, d.props); err != nil {
		firstReason(&d.plan.WaitReason, WaitSharingConflict)
		d.failures = append(d.failures, err)
		return onePool
	}
	s.origin[want] = pools[0]
	d.kept[f] = want
	if onePoolAPI(pools[0]) {
		onePool = pools[0]
	}
	return onePool
}

// settle makes the Service pending or not, records what it keeps unverified, and sets the
// ingress and the effects. prev are the addresses it held before this decision allocated.
func (d *decision) settle(wasPending bool, prev map[addrpool.Family]netip.Addr) {
	s, key := d.s, d.key
	if len(d.kept) < d.need || len(d.kept) == 0 {
		// Not enough to serve the Service: give back what this sync took, so a half
		// dual-stack Service does not sit on addresses others could use. What it held
		// before stays: taking a working address away would only add an outage.
		for f, a := range d.kept {
			if _, before := prev[f]; before {
				continue
			}
			// Not counted as freed: nobody waited for an address this sync had just
			// taken, and waking the pending Services (this one included) would loop.
			s.alloc.ReleaseAddr(key, a)
			s.forgetAddr(a)
			delete(d.kept, f)
		}
		s.pending[key] = true
		d.plan.PendingWhy = errors.Join(d.failures...)
		firstReason(&d.plan.WaitReason, WaitPoolExhausted)
		s.waitingAs[key] = s.pendingLabelsOf(d.svc, d.plan.WaitReason)
		d.plan.NewlyPending = !wasPending
	} else {
		s.stopWaitingFor(key, &d.plan.Effects)
	}
	if len(d.unverified) > 0 {
		d.plan.Unverified = d.unverified
		d.plan.NewUnverified = len(s.unverified[key]) == 0
		s.unverified[key] = d.unverified
	} else {
		delete(s.unverified, key)
	}
	addrs := make([]netip.Addr, 0, len(d.kept))
	for _, a := range d.kept {
		addrs = append(addrs, a)
	}
	d.plan.Ingress = desiredIngress(addrs, d.fams)
	if d.freedAny {
		s.retryWaiting(&d.plan.Effects)
	}
	s.allocationChanged(&d.plan.Effects)
	s.seal(&d.plan.Effects)
}

// The helpers below expect mu held (Assign's).

// pendingLabelsOf are the pending gauge's labels of svc waiting for reason: the pool it
// names ("" if none) and that pool's API, or the API read first when it names none.
func (s *State) pendingLabelsOf(svc *v1.Service, reason string) PendingLabels {
	if named, _ := namedPool(svc, s.apis); named != "" {
		api, pool := poolsource.Labels(named)
		return PendingLabels{API: api, Pool: pool, Reason: reason}
	}
	return PendingLabels{API: s.apis[0].Name, Reason: reason}
}

// allocateAuto allocates addresses of fams for key from candidates, into kept. Pools of a
// OnePool API (MetalLB's) give all of them or, when the Service accepts fewer
// (PreferDualStack), the first pool in order that gives at least need; a pool of another
// API may give each family from another pool. onePool, when set, is the OnePool pool the
// Service already holds an address of: only it may give more. held says the Service holds
// an address already.
func (s *State) allocateAuto(key string, fams []addrpool.Family, need int, candidates []string, onePool string, held bool, props addrpool.Props, kept map[addrpool.Family]netip.Addr) []error {
	var failures []error
	perFamily := func(pools []string) {
		for _, f := range fams {
			if _, ok := kept[f]; ok {
				continue
			}
			a, pool, err := s.alloc.Allocate(key, f, pools, props)
			if err != nil {
				failures = append(failures, err)
				continue
			}
			s.origin[a] = pool
			kept[f] = a
		}
	}
	if onePool != "" {
		perFamily([]string{onePool})
		return failures
	}
	var perFam, whole []string
	for _, p := range candidates {
		if onePoolAPI(p) {
			whole = append(whole, p)
		} else {
			perFam = append(perFam, p)
		}
	}
	if held {
		// What the Service holds is from a pool of another API: OnePool pools cannot join.
		perFamily(perFam)
		return failures
	}
	// The API listed first in --pool-api goes first.
	wholeFirst := len(candidates) > 0 && onePoolAPI(candidates[0])
	if wholeFirst && s.allocateWhole(key, fams, need, whole, props, kept) {
		return nil
	}
	if len(perFam) > 0 {
		perFamily(perFam)
		if len(kept) > 0 {
			return failures
		}
	}
	if !wholeFirst && len(whole) > 0 && s.allocateWhole(key, fams, need, whole, props, kept) {
		return nil
	}
	if len(whole) > 0 {
		failures = append(failures, fmt.Errorf("no MetalLB pool this Service may use has free addresses of families %v: %w", fams, addrpool.ErrExhausted))
	}
	if len(candidates) == 0 {
		perFamily(nil) // says no pool had a free address
	}
	return failures
}

// allocateWhole takes every family of fams from the first of pools that has them all, else
// at least need of them (at least one) from the first that has that many; it reports
// whether kept got any.
func (s *State) allocateWhole(key string, fams []addrpool.Family, need int, pools []string, props addrpool.Props, kept map[addrpool.Family]netip.Addr) bool {
	fallback := ""
	for _, name := range pools {
		got := map[addrpool.Family]netip.Addr{}
		for _, f := range fams {
			if a, _, err := s.alloc.Allocate(key, f, []string{name}, props); err == nil {
				got[f] = a
			}
		}
		if len(got) == len(fams) {
			for f, a := range got {
				s.origin[a] = name
				kept[f] = a
			}
			return true
		}
		for _, a := range got {
			s.alloc.ReleaseAddr(key, a)
		}
		if len(got) >= max(need, 1) && fallback == "" {
			fallback = name
		}
	}
	if fallback == "" {
		return false
	}
	for _, f := range fams {
		if a, _, err := s.alloc.Allocate(key, f, []string{fallback}, props); err == nil {
			s.origin[a] = fallback
			kept[f] = a
		}
	}
	return len(kept) > 0
}
