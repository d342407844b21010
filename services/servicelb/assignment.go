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

	"github.com/prometheus/client_golang/prometheus"
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

// showGauges sets the gauges to g unless a later decision's numbers were shown already. A
// series whose pool (or reason) is gone is deleted, not left at its last value.
func (c *Controller) showGauges(g gauges) {
	if g.level == gaugesNone {
		return
	}
	c.gaugeMu.Lock()
	defer c.gaugeMu.Unlock()
	if g.level == gaugesAll && g.seq > c.gaugesShown {
		c.gaugesShown = g.seq
		pools := map[[3]string]float64{}
		free := map[[3]string]float64{}
		for key, st := range g.pools {
			api, pool := poolLabels(key)
			pools[[3]string{"IPv4", api, pool}] = float64(st.AssignedIPv4)
			pools[[3]string{"IPv6", api, pool}] = float64(st.AssignedIPv6)
			free[[3]string{"IPv4", api, pool}] = float64(st.AvailableIPv4)
			free[[3]string{"IPv6", api, pool}] = float64(st.AvailableIPv6)
		}
		c.shownPools = showVec(c.metrics.assigned, 3, c.shownPools, pools)
		c.shownFree = showVec(c.metrics.available, 3, c.shownFree, free)
		// Each pool API always shows an unknown-pool series (0 when none), so a dashboard or an
		// alert sees 0, not "no data", when nothing is unverified.
		unverified := map[[3]string]float64{}
		for _, api := range c.state.apis {
			unverified[[3]string{api, ""}] += 0
		}
		for key, n := range g.unverified {
			api, pool := c.state.apis[0], ""
			if key != "" {
				api, pool = poolLabels(key)
			}
			unverified[[3]string{api, pool}] += float64(n)
		}
		c.shownUnverified = showVec(c.metrics.unverified, 2, c.shownUnverified, unverified)
	}
	if g.seq > c.pendingShown {
		c.pendingShown = g.seq
		// As above: per pool API, a series without pool and reason is 0 while nothing waits.
		pending := map[[3]string]float64{}
		for _, api := range c.state.apis {
			pending[[3]string{api, "", ""}] += 0
		}
		for l, n := range g.pending {
			pending[[3]string{l.api, l.pool, l.reason}] += float64(n)
		}
		c.shownPending = showVec(c.metrics.pending, 3, c.shownPending, pending)
	}
}

// showVec sets vec's series to values (the first n of each key are its label values) and deletes those of shown that are no longer there; it returns what is shown.
func showVec(vec *prometheus.GaugeVec, n int, shown map[[3]string]bool, values map[[3]string]float64) map[[3]string]bool {
	now := make(map[[3]string]bool, len(values))
	for k, v := range values {
		vec.WithLabelValues(k[:n]...).Set(v)
		now[k] = true
	}
	for k := range shown {
		if !now[k] {
			vec.DeleteLabelValues(k[:n]...)
		}
	}
	return now
}

func (c *Controller) namespaceLabels(name string) labels.Set {
	ns, err := c.namespaces.Get(name)
	if err != nil {
		return nil
	}
	return labels.Set(ns.Labels)
}

// ---- writes ----
