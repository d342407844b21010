package nodelifecycle

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// handleDisruption updates zone states and rates from this round's counts. When every zone
// is fully disrupted the problem is most likely between the control plane and the Nodes,
// not the Nodes: all NoExecute taints this controller placed are removed and tainting stops
// everywhere until some Node is Ready again, at which point every Node gets a fresh grace
// period.
func (c *Controller) handleDisruption(ctx context.Context, counts map[string]*zoneCount, nodes []*v1.Node) {
	logger := klog.FromContext(ctx)
	newStates, allDownNow := c.zoneStates(counts)

	c.mu.Lock()
	wasAllDown := c.allDown
	now := c.now()
	// Zones with no counted Node (all gone or excluded) take no part.
	for k, z := range c.zones {
		if _, ok := counts[k]; !ok {
			c.metrics.zoneSize.WithLabelValues(k).Set(0)
			c.metrics.unhealthy.WithLabelValues(k).Set(0)
			c.metrics.zoneHealth.WithLabelValues(k).Set(100)
			z.state = StateInitial
		}
	}
	switch {
	case allDownNow && wasAllDown:
		// Still down: nothing changes.
	case allDownNow:
		c.allDown = true
		for _, z := range c.zones {
			z.tainter.setRate(0, now)
			z.tainter.clear()
			z.state = StateFullDisruption
		}
	case wasAllDown:
		c.allDown = false
		for k, z := range c.zones {
			s, ok := newStates[k]
			if !ok {
				s = StateInitial
			}
			z.state = s
			z.tainter.setRate(c.opts.zoneRate(s, sizeOf(counts[k])), now)
		}
	default:
		for k, s := range newStates {
			z := c.zones[k]
			if z == nil || z.state == s {
				continue
			}
			from := z.state
			z.state = s
			z.tainter.setRate(c.opts.zoneRate(s, sizeOf(counts[k])), now)
			logger.Info("Zone changed state", "zone", zoneName(k), "from", from, "to", s, "rate", z.tainter.Rate())
			c.zoneEvent(k, from, s, counts[k], z.tainter.Rate())
		}
	}
	c.updatePauseMetrics()
	c.mu.Unlock()

	switch {
	case allDownNow && !wasAllDown:
		logger.Info("No zone has a Ready node: entering all-zones-down mode, NoExecute tainting stops and its taints are removed")
		c.recorder.Eventf(zoneEventObject, v1.EventTypeWarning, ReasonAllZonesDown,
			"No Ready Node in any of %d zones: NoExecute tainting stopped everywhere and the NoExecute taints of this controller removed; grace periods restart once a Node is Ready", len(counts))
		for _, n := range nodes {
			if err := c.markReachable(ctx, n); err != nil {
				logger.Error(err, "Removing NoExecute taints in all-zones-down mode", "node", n.Name)
			}
		}
	case !allDownNow && wasAllDown:
		logger.Info("Some node is Ready again: leaving all-zones-down mode, every node gets a fresh grace period")
		c.health.restartGrace()
		c.recorder.Eventf(zoneEventObject, v1.EventTypeNormal, ReasonAllZonesDownEnded,
			"A Node is Ready again: NoExecute tainting resumes per zone; every Node got a fresh grace period")
	}
}

// zoneStates sets the metrics of each zone in counts and returns its state, and whether every
// one of them (at least one) is fully disrupted.
func (c *Controller) zoneStates(counts map[string]*zoneCount) (map[string]ZoneState, bool) {
	states := make(map[string]ZoneState, len(counts))
	allDown := len(counts) > 0
	for k, zc := range counts {
		size := zc.ready + zc.notReady
		c.metrics.zoneSize.WithLabelValues(k).Set(float64(size))
		c.metrics.unhealthy.WithLabelValues(k).Set(float64(zc.notReady))
		c.metrics.zoneHealth.WithLabelValues(k).Set(float64(100*zc.ready) / float64(size))
		s := zoneState(zc.ready, zc.notReady, c.opts.UnhealthyZoneThreshold)
		states[k] = s
		if s != StateFullDisruption {
			allDown = false
		}
	}
	return states, allDown
}

func sizeOf(zc *zoneCount) int {
	if zc == nil {
		return 0
	}
	return zc.ready + zc.notReady
}

// zoneEvent records a zone's move into or out of disruption, saying what it does to
// NoExecute tainting: upstream only logs it, and "why are the Pods of my dead Node not
// evicted?" deserves an answer in the API.
func (c *Controller) zoneEvent(key string, from, to ZoneState, zc *zoneCount, rate float64) {
	name := zoneName(key)
	counted := fmt.Sprintf("%d of %d Nodes not Ready", zc.notReady, zc.ready+zc.notReady)
	switch to {
	case StatePartialDisruption:
		effect := fmt.Sprintf("NoExecute tainting slowed to %g Nodes/s (--%s)", rate, FlagSecondaryEvictionRate)
		if rate == 0 {
			effect = fmt.Sprintf("NoExecute tainting paused: the zone has no more than %d Nodes (--%s)", c.opts.LargeClusterThreshold, FlagLargeClusterThreshold)
		}
		c.recorder.Eventf(zoneEventObject, v1.EventTypeWarning, ReasonZoneDisrupted,
			"Zone %s is in PartialDisruption (%s): %s", name, counted, effect)
	case StateFullDisruption:
		effect := fmt.Sprintf("other zones are healthy, so NoExecute tainting continues at %g Nodes/s", rate)
		if c.opts.ZoneFullDisruptionEvictionRate != RateUnset {
			effect = fmt.Sprintf("other zones are healthy; NoExecute tainting at %g Nodes/s (--%s)", rate, FlagZoneFullDisruptionEvictionRate)
		}
		c.recorder.Eventf(zoneEventObject, v1.EventTypeWarning, ReasonZoneDisrupted,
			"Zone %s is in FullDisruption (%s): %s", name, counted, effect)
	case StateNormal:
		if from == StatePartialDisruption || from == StateFullDisruption {
			c.recorder.Eventf(zoneEventObject, v1.EventTypeNormal, ReasonZoneNormal,
				"Zone %s is Normal again (%s): NoExecute tainting at %g Nodes/s", name, counted, rate)
		}
	}
}

// updatePauseMetrics publishes each zone's rate and, for paused zones, why. Called with
// c.mu held.
func (c *Controller) updatePauseMetrics() {
	for k, z := range c.zones {
		r := z.tainter.Rate()
		c.metrics.zoneRate.WithLabelValues(k).Set(r)
		reason := ""
		switch {
		case c.allDown:
			reason = PauseAllZonesDown
		case r == 0 && z.state == StatePartialDisruption:
			reason = PausePartialDisruption
		}
		for _, other := range []string{PauseAllZonesDown, PausePartialDisruption} {
			if other != reason {
				c.metrics.paused.DeleteLabelValues(k, other)
			}
		}
		if reason != "" {
			c.metrics.paused.WithLabelValues(k, reason).Set(1)
		}
	}
}
