// Assignment: which addresses a Service holds, decided in one step under the allocation
// state's lock from its status, its requests, the pools and the allocator.

package servicelb

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	"github.com/kcm-split/kcm-split/services/servicelb/addrpool"
)

// assignment is what assign decided for one Service.
type assignment struct {
	ingress       []v1.LoadBalancerIngress
	moved         []move
	freed         []netip.Addr // released for a verified reason; nobody holds them any more
	unverified    map[netip.Addr]string
	newUnverified bool
	badInput      error
	newBadInput   bool // badInput differs from what was last reported
	pendingWhy    error
	newlyPending  bool
	// waitReason is the reason of pendingWhy (a Wait* constant).
	waitReason string
	// effects are the queue adds and gauges that follow, for after the lock.
	effects effects
}

type move struct {
	from netip.Addr
	why  string
}

// assignInputs are what assign needs to know besides the Service, read before the lock:
// the labels of its namespace, and whether the pools can be trusted (their API is served
// and their cache synced).
type assignInputs struct {
	nsLabels labels.Set
	known    bool
}

// assign decides, in one locked step, which addresses the Service holds: it takes over
// adopt, keeps what is valid or cannot be judged, releases what it has a verified reason
// to release, and allocates what is missing. The addresses chosen are claimed afterwards,
// outside the lock.
func (s *allocations) assign(logger klog.Logger, key string, svc *v1.Service, adopt []netip.Addr, in assignInputs) assignment {
	var plan assignment
	nsLabels, known := in.nsLabels, in.known
	fams, need := families(svc)
	props := propsOf(svc)

	s.mu.Lock()
	defer s.mu.Unlock()
	wasPending := s.pending[key]
	requested, reqErr := requestedIPsFor(svc, fams, s.apis)
	var candidates []string
	var poolErr error
	if known {
		candidates, poolErr = candidatePoolsFor(s.pools, svc, nsLabels, s.apis)
	}
	plan.badInput = errors.Join(reqErr, poolErr)
	if plan.badInput == nil {
		delete(s.badInput, key)
	} else if msg := plan.badInput.Error(); s.badInput[key] != msg {
		s.badInput[key] = msg
		plan.newBadInput = true
	}
	freedAny := false
	free := func(a netip.Addr) {
		if s.alloc.ReleaseAddr(key, a) {
			freedAny = true
			plan.freed = append(plan.freed, a)
			s.forgetAddr(a)
		}
	}

	// Take over what another writer showed and claimed for this Service, dropping our own
	// unpublished choice of that family.
	for _, a := range adopt {
		s.alloc.ReleaseAddr(takenKey(a), a)
		for _, h := range s.alloc.Assigned(key) {
			if h != a && addrpool.FamilyOf(h) == addrpool.FamilyOf(a) {
				free(h)
			}
		}
		if err := s.alloc.Claim(key, a, props); err != nil {
			logger.V(2).Info("Cannot take over the address in the status", "address", a, "err", err)
		}
	}

	// Keep what is valid or cannot be judged now.
	kept := map[addrpool.Family]netip.Addr{}
	unverified := map[netip.Addr]string{}
	for _, a := range s.alloc.Assigned(key) {
		why, release := s.keepOrRelease(svc, a, fams, requested, reqErr, candidates, known, nsLabels)
		if !release {
			if err := s.alloc.Claim(key, a, props); err != nil {
				why, release = err.Error(), true
			}
		}
		if release {
			free(a)
			plan.moved = append(plan.moved, move{from: a, why: why})
			continue
		}
		if why != "" {
			unverified[a] = why
		}
		kept[addrpool.FamilyOf(a)] = a
	}
	prev := maps.Clone(kept)

	// Allocate what is missing. A MetalLB pool gives all of a Service's addresses: its
	// speaker announces an address only when every address of the Service is in one of its
	// pools. onePool is that pool once one address comes from it.
	onePool := ""
	for _, a := range kept {
		if p := s.origin[a]; isMetalLBPool(p) {
			onePool = p
		}
	}
	named, _ := namedPool(svc, s.apis)
	var failures []error
	var missing []addrpool.Family
	for _, f := range fams {
		if _, ok := kept[f]; !ok {
			missing = append(missing, f)
		}
	}
	switch {
	case len(missing) == 0:
	case !known:
		firstReason(&plan.waitReason, WaitPoolAPIUnavailable)
		for _, f := range missing {
			failures = append(failures, fmt.Errorf("%s: the IPAddressPool API is not available or not synced yet", f))
		}
		missing = nil
	case reqErr != nil || poolErr != nil:
		if reqErr == nil {
			firstReason(&plan.waitReason, WaitNoMatchingPool)
		}
		firstReason(&plan.waitReason, WaitInvalidRequest)
		for _, f := range missing {
			failures = append(failures, fmt.Errorf("%s: the Service's request is invalid", f))
		}
		missing = nil
	}
	var auto []addrpool.Family
	for _, f := range missing {
		want, ok := requested[f]
		if !ok {
			auto = append(auto, f)
			continue
		}
		pools := s.admittingPoolsContaining(svc, want, nsLabels)
		if named != "" {
			pools = slices.DeleteFunc(pools, func(p string) bool { return p != named })
		}
		if len(pools) == 0 {
			firstReason(&plan.waitReason, WaitRequestedIPNotInPool)
			if named != "" {
				failures = append(failures, fmt.Errorf("%s is not in pool %s named by the Service, or that pool does not admit it", want, displayPool(named)))
			} else {
				failures = append(failures, fmt.Errorf("%s is in no pool this Service may use", want))
			}
			continue
		}
		if onePool != "" && pools[0] != onePool || onePool == "" && len(kept) > 0 && isMetalLBPool(pools[0]) {
			firstReason(&plan.waitReason, WaitRequestedIPNotInPool)
			failures = append(failures, fmt.Errorf("%s is in pool %s, not in the pool of the Service's other address: MetalLB announces only a Service whose addresses are all in one pool", want, displayPool(pools[0])))
			continue
		}
		if err := s.alloc.Claim(key, want, props); err != nil {
			firstReason(&plan.waitReason, WaitSharingConflict)
			failures = append(failures, err)
			continue
		}
		s.origin[want] = pools[0]
		kept[f] = want
		if isMetalLBPool(pools[0]) {
			onePool = pools[0]
		}
	}
	if len(auto) > 0 {
		if len(candidates) == 0 {
			firstReason(&plan.waitReason, WaitNoMatchingPool)
		}
		firstReason(&plan.waitReason, WaitPoolExhausted)
		failures = append(failures, s.allocateAuto(key, auto, need-len(kept), candidates, onePool, len(kept) > 0, props, kept)...)
	}

	if len(kept) < need || len(kept) == 0 {
		// Not enough to serve the Service: give back what this sync took, so a half
		// dual-stack Service does not sit on addresses others could use. What it held
		// before stays: taking a working address away would only add an outage.
		for f, a := range kept {
			if _, before := prev[f]; before {
				continue
			}
			// Not counted as freed: nobody waited for an address this sync had just
			// taken, and waking the pending Services (this one included) would loop.
			s.alloc.ReleaseAddr(key, a)
			s.forgetAddr(a)
			delete(kept, f)
		}
		s.pending[key] = true
		plan.pendingWhy = errors.Join(failures...)
		firstReason(&plan.waitReason, WaitPoolExhausted)
		s.waitingAs[key] = s.pendingLabelsOf(svc, plan.waitReason)
		plan.newlyPending = !wasPending
	} else {
		s.stopWaitingFor(key, &plan.effects)
	}
	if len(unverified) > 0 {
		plan.unverified = unverified
		plan.newUnverified = len(s.unverified[key]) == 0
		s.unverified[key] = unverified
	} else {
		delete(s.unverified, key)
	}
	addrs := make([]netip.Addr, 0, len(kept))
	for _, a := range kept {
		addrs = append(addrs, a)
	}
	plan.ingress = desiredIngress(addrs, fams)
	if freedAny {
		s.retryWaiting(&plan.effects)
	}
	s.allocationChanged(&plan.effects)
	s.seal(&plan.effects)
	logger.V(4).Info("Assigned", "addresses", plan.describe(), "pending", s.pending[key])
	return plan
}

// The helpers below expect mu held (assign's).

// pendingLabelsOf are the pending gauge's labels of svc waiting for reason: the pool it
// names ("" if none) and that pool's API, or the API read first when it names none.
func (s *allocations) pendingLabelsOf(svc *v1.Service, reason string) pendingLabels {
	if named, _ := namedPool(svc, s.apis); named != "" {
		api, pool := poolLabels(named)
		return pendingLabels{api: api, pool: pool, reason: reason}
	}
	return pendingLabels{api: s.apis[0], reason: reason}
}

// allocateAuto allocates addresses of fams for key from candidates, into kept. MetalLB pools
// give all of them or, when the Service accepts fewer (PreferDualStack), the first pool in
// order that gives at least need; a pool of the project's own API may give each family from
// another pool, as before. onePool, when set, is the MetalLB pool the Service already holds
// an address of: only it may give more. held says the Service holds an address already.
func (s *allocations) allocateAuto(key string, fams []addrpool.Family, need int, candidates []string, onePool string, held bool, props addrpool.Props, kept map[addrpool.Family]netip.Addr) []error {
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
	var own, metal []string
	for _, p := range candidates {
		if isMetalLBPool(p) {
			metal = append(metal, p)
		} else {
			own = append(own, p)
		}
	}
	if held {
		// What the Service holds is from the project's own API: MetalLB pools cannot join.
		perFamily(own)
		return failures
	}
	wholePool := func() bool {
		fallback := ""
		for _, name := range metal {
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
	// The API listed first in --pool-api goes first.
	metalFirst := len(candidates) > 0 && isMetalLBPool(candidates[0])
	if metalFirst && wholePool() {
		return nil
	}
	if len(own) > 0 {
		perFamily(own)
		if len(kept) > 0 {
			return failures
		}
	}
	if !metalFirst && len(metal) > 0 && wholePool() {
		return nil
	}
	if len(metal) > 0 {
		failures = append(failures, fmt.Errorf("no MetalLB pool this Service may use has free addresses of families %v: %w", fams, addrpool.ErrExhausted))
	}
	if len(candidates) == 0 {
		perFamily(nil) // says no pool had a free address
	}
	return failures
}

// keepOrRelease says whether svc may keep a. An empty why keeps it, verified. A why with
// release=false keeps it although it cannot be verified now (the pools are unknown, or the
// pool it came from was deleted or is invalid): clearing it on such a guess would take a
// working address away. A why with release=true is a verified reason to give it back: the
// Service changed, or a valid, synced pool no longer covers the address or admits the
// Service.
func (s *allocations) keepOrRelease(svc *v1.Service, a netip.Addr, fams []addrpool.Family, requested map[addrpool.Family]netip.Addr, reqErr error, candidates []string, known bool, nsLabels labels.Set) (why string, release bool) {
	f := addrpool.FamilyOf(a)
	if !slices.Contains(fams, f) {
		return fmt.Sprintf("the Service no longer has IP family %s", f), true
	}
	want, wanted := requested[f]
	if reqErr == nil && wanted && want != a {
		return fmt.Sprintf("the Service asks for %s", want), true
	}
	if !known {
		return "the IPAddressPool API is not available or not synced", false
	}
	if name, _ := namedPool(svc, s.apis); name != "" {
		pi := s.pools[name]
		switch {
		case pi == nil:
			return fmt.Sprintf("pool %s named by the Service does not exist", name), false
		case !pi.valid:
			return fmt.Sprintf("pool %s named by the Service is not valid", name), false
		}
		if p, ok := s.alloc.Pool(name); !ok || !p.Contains(a) {
			return fmt.Sprintf("the Service asks for pool %s, which does not contain it", name), true
		}
		if !pi.admits(svc, nsLabels) {
			return fmt.Sprintf("pool %s does not admit this Service", name), true
		}
		s.origin[a] = name
		return "", false
	}
	admitting := s.admittingPoolsContaining(svc, a, nsLabels)
	if len(admitting) > 0 {
		s.origin[a] = admitting[0]
		if reqErr == nil && wanted {
			return "", false
		}
		for _, name := range candidates {
			if slices.Contains(admitting, name) {
				return "", false
			}
		}
		if len(candidates) == 0 {
			// Held from a pool the Service may still use but that no longer
			// auto-assigns: keeping it is less disruptive than moving it.
			return "", false
		}
		return fmt.Sprintf("pool %s no longer assigns it automatically and others do", admitting[0]), true
	}
	if p := s.validPoolContaining(a); p != "" {
		s.origin[a] = p
		return fmt.Sprintf("pool %s does not admit this Service", p), true
	}
	origin := s.origin[a]
	if origin == "" {
		return "no pool is known to have contained it", false
	}
	pi := s.pools[origin]
	switch {
	case pi == nil:
		return fmt.Sprintf("its pool %s was deleted", origin), false
	case !pi.valid:
		return fmt.Sprintf("its pool %s is not valid: %s", origin, pi.message), false
	}
	return fmt.Sprintf("pool %s no longer contains it", origin), true
}

// admittingPoolsContaining returns the valid pools admitting svc that contain a.
func (s *allocations) admittingPoolsContaining(svc *v1.Service, a netip.Addr, nsLabels labels.Set) []string {
	var out []string
	for _, name := range admittingPoolsFor(s.pools, svc, nsLabels) {
		if p, ok := s.alloc.Pool(name); ok && p.Contains(a) {
			out = append(out, name)
		}
	}
	return out
}
