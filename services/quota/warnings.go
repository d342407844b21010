package quota

import (
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// ReasonCannotCount is the reason of the warning Event on a quota one of whose resource types
// cannot be counted.
const ReasonCannotCount = "CannotCountResource"

// warnUncountable writes a warning Event the first time a resource type of the quota cannot be
// counted (once its informer has had its chance), and forgets it once it is counted again.
func (c *Controller) warnUncountable(rq *v1.ResourceQuota, counted []schema.GroupResource, uncountables []uncountable) {
	k := key(rq)
	c.warnedMu.Lock()
	defer c.warnedMu.Unlock()
	warned := c.warned[k]
	for _, gr := range counted {
		delete(warned, gr)
	}
	for _, p := range uncountables {
		if p.state == stateStarting || warned[p.gr] {
			continue
		}
		if warned == nil {
			warned = map[schema.GroupResource]bool{}
			c.warned[k] = warned
		}
		warned[p.gr] = true
		names := make([]string, len(p.names))
		for i, n := range p.names {
			names[i] = string(n)
		}
		sort.Strings(names)
		c.recorder.Eventf(rq, v1.EventTypeWarning, ReasonCannotCount,
			"Cannot count %s (%s); status.used keeps its last value for %s until it can be counted again",
			describeResource(p.gr), truncate(p.reason, 300), strings.Join(names, ", "))
	}
	if len(warned) == 0 {
		delete(c.warned, k)
	}
}

// forgetWarnings drops what was warned about a quota that is gone.
func (c *Controller) forgetWarnings(qkey string) {
	c.warnedMu.Lock()
	delete(c.warned, qkey)
	c.warnedMu.Unlock()
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
