// Assignment, the Controller's side: the inputs of the state's decision (state_assign.go),
// and the queue adds, gauges and Events that follow from it.

package servicelb

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"
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

// assign has the state decide which addresses the Service holds (state_assign.go), then
// queues and shows what follows from it.
func (c *Controller) assign(ctx context.Context, key string, svc *v1.Service, adopt []netip.Addr) assignment {
	in := assignInputs{nsLabels: c.namespaceLabels(svc.Namespace), known: c.poolsKnown()}
	plan := c.state.assign(klog.FromContext(ctx), key, svc, adopt, in)
	c.apply(plan.effects)
	return plan
}

// apply does what a decision over the state asks for, after its lock was released.
func (c *Controller) apply(e effects) {
	for _, k := range e.requeue {
		c.queue.Add(k)
	}
	for _, name := range e.pools {
		c.poolQueue.AddAfter(name, c.opts.PoolStatusDelay)
	}
	c.showGauges(e.gauges)
}

// showGauges sets the gauges to g unless a later decision's numbers were shown already.
func (c *Controller) showGauges(g gauges) {
	if g.level == gaugesNone {
		return
	}
	c.gaugeMu.Lock()
	defer c.gaugeMu.Unlock()
	if g.level == gaugesAll && g.seq > c.gaugesShown {
		c.gaugesShown = g.seq
		c.metrics.assigned.WithLabelValues("IPv4").Set(float64(g.stats.AssignedIPv4))
		c.metrics.assigned.WithLabelValues("IPv6").Set(float64(g.stats.AssignedIPv6))
		c.metrics.available.WithLabelValues("IPv4").Set(float64(g.stats.AvailableIPv4))
		c.metrics.available.WithLabelValues("IPv6").Set(float64(g.stats.AvailableIPv6))
		c.metrics.unverified.Set(float64(g.unverified))
	}
	if g.seq > c.pendingShown {
		c.pendingShown = g.seq
		c.metrics.pending.Set(float64(g.pending))
	}
}

func (c *Controller) namespaceLabels(name string) labels.Set {
	ns, err := c.namespaces.Get(name)
	if err != nil {
		return nil
	}
	return labels.Set(ns.Labels)
}

// ---- writes ----
