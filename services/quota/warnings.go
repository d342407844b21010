package quota

import (
	"slices"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// ReasonCannotCount is the reason of the warning Event on a quota one of whose resource types
// cannot be counted.
const ReasonCannotCount = "CannotCountResource"

// AnnUncountable is the annotation naming, on a quota, the resources (as in spec.hard, sorted,
// comma-separated) whose usage could not be counted at its last sync and keeps its last value
// in status.used. It is written with the status, removed once they are counted again, and
// never present otherwise (--resource-quota-uncountable-annotation).
const AnnUncountable = "quota.kcm-split.io/uncountable-resources"

// uncountableAnnotation is the value AnnUncountable should have after a sync that could not
// count uncountables: "" when none, or when the annotation is turned off.
func (c *Controller) uncountableAnnotation(uncountables []uncountable) string {
	if !c.opts.UncountableAnnotation {
		return ""
	}
	var names []string
	for _, p := range uncountables {
		for _, n := range p.names {
			names = append(names, string(n))
		}
	}
	slices.Sort(names)
	return strings.Join(slices.Compact(names), ",")
}

// setUncountable sets AnnUncountable on rq (a copy) to value, or removes it when value is "".
func setUncountable(rq *v1.ResourceQuota, value string) {
	if value != "" {
		metav1.SetMetaDataAnnotation(&rq.ObjectMeta, AnnUncountable, value)
		return
	}
	if _, ok := rq.Annotations[AnnUncountable]; !ok {
		return
	}
	delete(rq.Annotations, AnnUncountable)
	if len(rq.Annotations) == 0 {
		rq.Annotations = nil
	}
}

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
