// Assignment: which addresses a Service holds, decided under the controller's lock from
// its status, its requests, the pools and the allocator, and the bookkeeping around it.

package servicelb

import (
	"context"
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
)

// report emits AllocationFailed when svc has just become pending, and AddressUnverified
// when it has just begun to keep an address no pool vouches for.
func (c *Controller) report(svc *v1.Service, plan assignment) {
	if plan.newlyPending {
		c.recorder.Eventf(svc, v1.EventTypeWarning, ReasonAllocationFailed, "Failed to allocate an address: %v; will retry as soon as an address frees up", plan.pendingWhy)
	}
	if plan.newUnverified {
		var s []string
		for _, a := range slices.SortedFunc(maps.Keys(plan.unverified), netip.Addr.Compare) {
			s = append(s, fmt.Sprintf("%s (%s)", a, plan.unverified[a]))
		}
		c.recorder.Eventf(svc, v1.EventTypeWarning, ReasonAddressUnverified,
			"Keeping %s although no pool can vouch for it now; it stays reserved for this Service and is moved only for a verified reason", strings.Join(s, ", "))
	}
}

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
}

type move struct {
	from netip.Addr
	why  string
}

func (a assignment) describe() string {
	var ips []string
	for _, in := range a.ingress {
		ips = append(ips, in.IP)
	}
	if len(ips) == 0 {
		return "no address"
	}
	return strings.Join(ips, ", ")
}

// assign decides, under the lock, which addresses the Service holds: it takes over adopt,
// keeps what is valid or cannot be judged, releases what it has a verified reason to
// release, and allocates what is missing.
func (c *Controller) assign(ctx context.Context, key string, svc *v1.Service, adopt []netip.Addr) assignment {
	var plan assignment
	nsLabels := c.namespaceLabels(svc.Namespace)
	fams, need := families(svc)
	props := propsOf(svc)
	known := c.poolsKnown()

	c.mu.Lock()
	defer c.mu.Unlock()
	wasPending := c.pending[key]
	requested, reqErr := requestedIPs(svc, fams)
	var candidates []string
	var poolErr error
	if known {
		candidates, poolErr = candidatePools(c.poolInfo, svc, nsLabels)
	}
	plan.badInput = errors.Join(reqErr, poolErr)
	if plan.badInput == nil {
		delete(c.badInput, key)
	} else if msg := plan.badInput.Error(); c.badInput[key] != msg {
		c.badInput[key] = msg
		plan.newBadInput = true
	}
	freedAny := false
	free := func(a netip.Addr) {
		if c.alloc.ReleaseAddr(key, a) {
			freedAny = true
			plan.freed = append(plan.freed, a)
			c.forgetAddrLocked(a)
		}
	}

	// Take over what another writer showed and claimed for this Service, dropping our own
	// unpublished choice of that family.
	for _, a := range adopt {
		c.alloc.ReleaseAddr(takenKey(a), a)
		for _, h := range c.alloc.Assigned(key) {
			if h != a && addrpool.FamilyOf(h) == addrpool.FamilyOf(a) {
				free(h)
			}
		}
		if err := c.alloc.Claim(key, a, props); err != nil {
			klog.FromContext(ctx).V(2).Info("Cannot take over the address in the status", "address", a, "err", err)
		}
	}

	// Keep what is valid or cannot be judged now.
	kept := map[addrpool.Family]netip.Addr{}
	unverified := map[netip.Addr]string{}
	for _, a := range c.alloc.Assigned(key) {
		why, release := c.judgeLocked(svc, a, fams, requested, reqErr, candidates, known, nsLabels)
		if !release {
			if err := c.alloc.Claim(key, a, props); err != nil {
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

	// Allocate what is missing.
	var failures []error
	for _, f := range fams {
		if _, ok := kept[f]; ok {
			continue
		}
		if !known {
			failures = append(failures, fmt.Errorf("%s: the IPAddressPool API is not available or not synced yet", f))
			continue
		}
		if reqErr != nil || poolErr != nil {
			failures = append(failures, fmt.Errorf("%s: the Service's request is invalid", f))
			continue
		}
		if want, ok := requested[f]; ok {
			pools := c.poolsContainingLocked(svc, want, nsLabels)
			if len(pools) == 0 {
				failures = append(failures, fmt.Errorf("%s is in no pool this Service may use", want))
				continue
			}
			if err := c.alloc.Claim(key, want, props); err != nil {
				failures = append(failures, err)
				continue
			}
			c.origin[want] = pools[0]
			kept[f] = want
			continue
		}
		a, pool, err := c.alloc.Allocate(key, f, candidates, props)
		if err != nil {
			failures = append(failures, err)
			continue
		}
		c.origin[a] = pool
		kept[f] = a
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
			c.alloc.ReleaseAddr(key, a)
			c.forgetAddrLocked(a)
			delete(kept, f)
		}
		c.pending[key] = true
		plan.pendingWhy = errors.Join(failures...)
		plan.newlyPending = !wasPending
	} else {
		c.unpendLocked(key)
	}
	if len(unverified) > 0 {
		plan.unverified = unverified
		plan.newUnverified = len(c.unverified[key]) == 0
		c.unverified[key] = unverified
	} else {
		delete(c.unverified, key)
	}
	addrs := make([]netip.Addr, 0, len(kept))
	for _, a := range kept {
		addrs = append(addrs, a)
	}
	plan.ingress = desiredIngress(addrs, fams)
	if freedAny {
		c.wakePendingLocked()
	}
	c.allocationChangedLocked()
	klog.FromContext(ctx).V(4).Info("Assigned", "addresses", plan.describe(), "pending", c.pending[key])
	return plan
}

// judgeLocked says whether svc may keep a. An empty why keeps it, verified. A why with
// release=false keeps it although it cannot be verified now (the pools are unknown, or the
// pool it came from was deleted or is invalid): clearing it on such a guess would take a
// working address away. A why with release=true is a verified reason to give it back: the
// Service changed, or a valid, synced pool no longer covers the address or admits the
// Service.
func (c *Controller) judgeLocked(svc *v1.Service, a netip.Addr, fams []addrpool.Family, requested map[addrpool.Family]netip.Addr, reqErr error, candidates []string, known bool, nsLabels labels.Set) (why string, release bool) {
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
	if name := strings.TrimSpace(svc.Annotations[AnnotationAddressPool]); name != "" {
		pi := c.poolInfo[name]
		switch {
		case pi == nil:
			return fmt.Sprintf("pool %s named by the Service does not exist", name), false
		case !pi.valid:
			return fmt.Sprintf("pool %s named by the Service is not valid", name), false
		}
		if p, ok := c.alloc.Pool(name); !ok || !p.Contains(a) {
			return fmt.Sprintf("the Service asks for pool %s, which does not contain it", name), true
		}
		if !pi.admits(svc, nsLabels) {
			return fmt.Sprintf("pool %s does not admit this Service", name), true
		}
		c.origin[a] = name
		return "", false
	}
	admitting := c.poolsContainingLocked(svc, a, nsLabels)
	if len(admitting) > 0 {
		c.origin[a] = admitting[0]
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
	if p := c.validPoolContainingLocked(a); p != "" {
		c.origin[a] = p
		return fmt.Sprintf("pool %s does not admit this Service", p), true
	}
	origin := c.origin[a]
	if origin == "" {
		return "no pool is known to have contained it", false
	}
	pi := c.poolInfo[origin]
	switch {
	case pi == nil:
		return fmt.Sprintf("its pool %s was deleted", origin), false
	case !pi.valid:
		return fmt.Sprintf("its pool %s is not valid: %s", origin, pi.message), false
	}
	return fmt.Sprintf("pool %s no longer contains it", origin), true
}

// validPoolContainingLocked returns the first valid pool (by name) containing a, or "".
func (c *Controller) validPoolContainingLocked(a netip.Addr) string {
	for _, name := range slices.Sorted(maps.Keys(c.poolInfo)) {
		if !c.poolInfo[name].valid {
			continue
		}
		if p, ok := c.alloc.Pool(name); ok && p.Contains(a) {
			return name
		}
	}
	return ""
}

// poolsContainingLocked returns the valid pools admitting svc that contain a.
func (c *Controller) poolsContainingLocked(svc *v1.Service, a netip.Addr, nsLabels labels.Set) []string {
	var out []string
	for _, name := range admittingPoolsFor(c.poolInfo, svc, nsLabels) {
		if p, ok := c.alloc.Pool(name); ok && p.Contains(a) {
			out = append(out, name)
		}
	}
	return out
}

func (c *Controller) unpendLocked(key string) {
	if c.pending[key] {
		delete(c.pending, key)
		c.metrics.pending.Set(float64(len(c.pending)))
	}
}

// wakePendingLocked queues every Service waiting for an address: one has just freed up, or
// pools changed.
func (c *Controller) wakePendingLocked() {
	for k := range c.pending {
		c.queue.Add(k)
	}
	c.metrics.pending.Set(float64(len(c.pending)))
}

// allocationChangedLocked schedules pool status updates and refreshes the gauges.
func (c *Controller) allocationChangedLocked() {
	for name := range c.poolInfo {
		c.poolQueue.AddAfter(name, c.opts.PoolStatusDelay)
	}
	c.updateGaugesLocked()
}

func (c *Controller) updateGaugesLocked() {
	var s addrpool.Stats
	for name, pi := range c.poolInfo {
		if !pi.valid {
			continue
		}
		ps := c.alloc.Stats(name)
		s.AssignedIPv4 += ps.AssignedIPv4
		s.AvailableIPv4 += ps.AvailableIPv4
		s.AssignedIPv6 += ps.AssignedIPv6
		s.AvailableIPv6 = addSat(s.AvailableIPv6, ps.AvailableIPv6)
	}
	c.metrics.assigned.WithLabelValues("IPv4").Set(float64(s.AssignedIPv4))
	c.metrics.assigned.WithLabelValues("IPv6").Set(float64(s.AssignedIPv6))
	c.metrics.available.WithLabelValues("IPv4").Set(float64(s.AvailableIPv4))
	c.metrics.available.WithLabelValues("IPv6").Set(float64(s.AvailableIPv6))
	c.metrics.pending.Set(float64(len(c.pending)))
	n := 0
	for _, m := range c.unverified {
		n += len(m)
	}
	c.metrics.unverified.Set(float64(n))
}

func addSat(x, y int64) int64 {
	if x > (1<<63-1)-y {
		return 1<<63 - 1
	}
	return x + y
}

func (c *Controller) namespaceLabels(name string) labels.Set {
	ns, err := c.namespaces.Get(name)
	if err != nil {
		return nil
	}
	return labels.Set(ns.Labels)
}

// ---- writes ----
