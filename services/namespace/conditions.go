package namespace

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// conditionTypes are the conditions this controller owns, in the order upstream writes them.
var conditionTypes = []v1.NamespaceConditionType{
	v1.NamespaceDeletionDiscoveryFailure,
	v1.NamespaceDeletionGVParsingFailure,
	v1.NamespaceDeletionContentFailure,
	v1.NamespaceContentRemaining,
	v1.NamespaceFinalizersRemaining,
}

// Reasons and messages, upstream's: tools and runbooks match on them.
const (
	ReasonDiscoveryFailed       = "DiscoveryFailed"
	ReasonGVParsingFailed       = "GroupVersionParsingFailed"
	ReasonContentDeletionFailed = "ContentDeletionFailed"
	ReasonSomeResourcesRemain   = "SomeResourcesRemain"
	ReasonSomeFinalizersRemain  = "SomeFinalizersRemain"
)

// healthy is the False variant of each condition.
var healthy = map[v1.NamespaceConditionType]struct{ reason, message string }{
	v1.NamespaceDeletionDiscoveryFailure: {"ResourcesDiscovered", "All resources successfully discovered"},
	v1.NamespaceDeletionGVParsingFailure: {"ParsedGroupVersions", "All legacy kube types successfully parsed"},
	v1.NamespaceDeletionContentFailure:   {"ContentDeleted", "All content successfully deleted, may be waiting on finalization"},
	v1.NamespaceContentRemaining:         {"ContentRemoved", "All content successfully removed"},
	v1.NamespaceFinalizersRemaining:      {"ContentHasNoFinalizers", "All content-preserving finalizers finished"},
}

// report is everything one sync learned about a namespace.
type report struct {
	discoveryErr error
	failedGroups []string
	failedGVs    []schema.GroupVersion
	parseErr     error
	// contentErrs are failures to delete or list one resource, keyed by resource.
	contentErrs map[schema.GroupVersionResource]error
	// remaining counts objects left per resource; finalizers counts objects per finalizer.
	remaining  map[schema.GroupVersionResource]int
	finalizers map[string]int
	// remainingNames and finalizerNames name the first few of those objects ("Kind/name").
	remainingNames map[schema.GroupVersionResource][]string
	finalizerNames map[string][]string
	// excused are the unavailable group versions this sync's discovery failure is forgiven
	// for (--allow-deletion-with-unavailable-groups); set by the controller, empty by default.
	excused []unavailableGV
	// wait is the longest estimate of the remaining objects.
	wait time.Duration
	// stopped says why the sync stopped early (StopGone, StopReplaced); empty if it did not.
	stopped string
}

func newReport(s *snapshot) *report {
	return &report{
		discoveryErr: s.discoveryErr,
		failedGroups: s.failedGroups,
		failedGVs:    s.failedGVs,
		parseErr:     s.parseErr,
		contentErrs:  map[schema.GroupVersionResource]error{},
		remaining:    map[schema.GroupVersionResource]int{},
		finalizers:   map[string]int{},

		remainingNames: map[schema.GroupVersionResource][]string{},
		finalizerNames: map[string][]string{},
	}
}

// add folds one resource's outcome in.
func (r *report) add(o outcome) {
	if o.stopped != "" && r.stopped == "" {
		r.stopped = o.stopped
	}
	if o.err != nil {
		r.contentErrs[o.gvr] = o.err
	}
	if o.remaining > 0 {
		r.remaining[o.gvr] += o.remaining
		r.remainingNames[o.gvr] = firstNames(r.remainingNames[o.gvr], o.names)
	}
	for f, n := range o.finalizers {
		r.finalizers[f] += n
		r.finalizerNames[f] = firstNames(r.finalizerNames[f], o.finalizerNames[f])
	}
	r.wait = max(r.wait, o.wait)
}

// firstNames merges two lists of object names and keeps the first namedPerEntry in sorted
// order, so the names a condition shows do not depend on which resource finished first.
func firstNames(a, b []string) []string {
	all := append(slices.Clone(a), b...)
	sort.Strings(all)
	all = slices.Compact(all)
	if len(all) > namedPerEntry {
		all = all[:namedPerEntry]
	}
	return all
}

// named appends the names to an upstream count message: "(Kind/a, Kind/b and 7 more)".
func named(msg string, names []string, total int) string {
	if len(names) == 0 {
		return msg
	}
	list := strings.Join(names, ", ")
	if more := total - len(names); more > 0 {
		list += fmt.Sprintf(" and %d more", more)
	}
	return msg + " (" + list + ")"
}

// failure is what keeps the namespace from being finalized other than remaining content:
// discovery, parsing or deletion errors. Partial discovery counts: a group that did not
// answer may hold objects in the namespace.
func (r *report) failure() error {
	var parts []string
	if r.discoveryErr != nil && !r.discoveryExcused() {
		parts = append(parts, r.discoveryErr.Error())
	}
	if r.parseErr != nil {
		parts = append(parts, r.parseErr.Error())
	}
	if msg := r.contentMessage(); msg != "" {
		parts = append(parts, msg)
	}
	if len(parts) == 0 {
		return nil
	}
	return fmt.Errorf("%s", strings.Join(parts, "; "))
}

// discoveryExcused reports whether every group version that failed discovery is excused:
// a discovery that failed as a whole (no list of failed group versions) never is.
func (r *report) discoveryExcused() bool {
	if len(r.failedGVs) == 0 || len(r.excused) == 0 {
		return false
	}
	for _, gv := range r.failedGVs {
		if !slices.ContainsFunc(r.excused, func(u unavailableGV) bool { return u.gv == gv }) {
			return false
		}
	}
	return true
}

func (r *report) contentMessage() string {
	if len(r.contentErrs) == 0 {
		return ""
	}
	msgs := make([]string, 0, len(r.contentErrs))
	for gvr, err := range r.contentErrs {
		msgs = append(msgs, fmt.Sprintf("%s: %v", resourceName(gvr), err))
	}
	sort.Strings(msgs)
	return fmt.Sprintf("Failed to delete all resource types, %d remaining: %s", len(msgs), strings.Join(msgs, ", "))
}

// resourceName is upstream's "<resource>.<group>" ("pods." for the core group).
func resourceName(gvr schema.GroupVersionResource) string {
	return gvr.Resource + "." + gvr.Group
}

// conditions returns the five conditions the report calls for: True with what went wrong,
// or False with upstream's all-clear message.
func (r *report) conditions() []v1.NamespaceCondition {
	set := map[v1.NamespaceConditionType]v1.NamespaceCondition{}
	bad := func(t v1.NamespaceConditionType, reason, msg string) {
		set[t] = v1.NamespaceCondition{Type: t, Status: v1.ConditionTrue, Reason: reason, Message: msg}
	}
	if r.discoveryErr != nil {
		msg := r.discoveryErr.Error()
		if len(r.failedGroups) > 0 {
			msg = fmt.Sprintf("Discovery failed for some groups, %d failing: %s", len(r.failedGroups), msg)
		}
		bad(v1.NamespaceDeletionDiscoveryFailure, ReasonDiscoveryFailed, msg)
	}
	if r.parseErr != nil {
		bad(v1.NamespaceDeletionGVParsingFailure, ReasonGVParsingFailed, r.parseErr.Error())
	}
	if msg := r.contentMessage(); msg != "" {
		bad(v1.NamespaceDeletionContentFailure, ReasonContentDeletionFailed, msg)
	}
	if len(r.remaining) > 0 {
		var parts []string
		for gvr, n := range r.remaining {
			parts = append(parts, named(fmt.Sprintf("%s has %d resource instances", resourceName(gvr), n), r.remainingNames[gvr], n))
		}
		sort.Strings(parts)
		bad(v1.NamespaceContentRemaining, ReasonSomeResourcesRemain, "Some resources are remaining: "+strings.Join(parts, ", "))
	}
	if len(r.finalizers) > 0 {
		var parts []string
		for f, n := range r.finalizers {
			parts = append(parts, named(fmt.Sprintf("%s in %d resource instances", f, n), r.finalizerNames[f], n))
		}
		sort.Strings(parts)
		bad(v1.NamespaceFinalizersRemaining, ReasonSomeFinalizersRemain, "Some content in the namespace has finalizers remaining: "+strings.Join(parts, ", "))
	}
	out := make([]v1.NamespaceCondition, 0, len(conditionTypes))
	for _, t := range conditionTypes {
		c, ok := set[t]
		if !ok {
			h := healthy[t]
			c = v1.NamespaceCondition{Type: t, Status: v1.ConditionFalse, Reason: h.reason, Message: h.message}
		}
		out = append(out, c)
	}
	return out
}

// mergeConditions writes want into status and reports whether anything changed. A
// condition keeps its transition time unless its status flips; conditions of other owners
// are kept as they are.
func mergeConditions(status *v1.NamespaceStatus, want []v1.NamespaceCondition, now metav1.Time) bool {
	changed := false
	for _, w := range want {
		i := indexOf(status.Conditions, w.Type)
		if i < 0 {
			w.LastTransitionTime = now
			status.Conditions = append(status.Conditions, w)
			changed = true
			continue
		}
		cur := &status.Conditions[i]
		if cur.Status == w.Status && cur.Reason == w.Reason && cur.Message == w.Message {
			continue
		}
		if cur.Status != w.Status {
			cur.LastTransitionTime = now
		}
		cur.Status, cur.Reason, cur.Message = w.Status, w.Reason, w.Message
		changed = true
	}
	return changed
}

func indexOf(conds []v1.NamespaceCondition, t v1.NamespaceConditionType) int {
	for i := range conds {
		if conds[i].Type == t {
			return i
		}
	}
	return -1
}

// writeConditions records the report on the namespace's status when it says something new,
// and tells what blocks the deletion in an Event when that changed.
// It reports whether it wrote.
func (c *Controller) writeConditions(ctx context.Context, ns *v1.Namespace, rep *report) (*v1.Namespace, bool, error) {
	want := rep.conditions()
	before := ns.DeepCopy()
	next := ns.DeepCopy()
	if !mergeConditions(&next.Status, want, metav1.NewTime(c.now())) {
		return ns, false, nil
	}
	out, err := c.update(ctx, next, func(cur *v1.Namespace) (*v1.Namespace, error) {
		cur = cur.DeepCopy()
		mergeConditions(&cur.Status, want, metav1.NewTime(c.now()))
		return c.namespaces.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
	})
	if err == nil && out != nil {
		c.explain(before, want)
	}
	return out, err == nil && out != nil, err
}

// blocking are the conditions that, when True, keep a namespace from going away on their
// own account, with the Event each one triggers.
var blocking = map[v1.NamespaceConditionType]struct {
	reason, eventType, prefix string
}{
	v1.NamespaceDeletionDiscoveryFailure: {EventDiscoveryFailed, v1.EventTypeWarning, "Namespace deletion is blocked until these APIs answer or are removed"},
	v1.NamespaceDeletionGVParsingFailure: {EventGVParsingFailed, v1.EventTypeWarning, "Namespace deletion is blocked by API groups whose names do not parse"},
	v1.NamespaceDeletionContentFailure:   {EventContentDeletionFailed, v1.EventTypeWarning, "Namespace deletion is blocked by failing APIs"},
	v1.NamespaceFinalizersRemaining:      {EventSomeFinalizersRemain, v1.EventTypeNormal, "Namespace deletion waits for finalizers"},
}

// withoutNames drops the " (Kind/a, Kind/b and 7 more)" lists named appends (neither names,
// kinds nor finalizers hold parentheses): a new Event is for a change of what blocks
// (another finalizer, another count), not for the next few objects being named as the
// first ones go.
func withoutNames(msg string) string {
	var b strings.Builder
	for {
		i := strings.Index(msg, " (")
		if i < 0 {
			break
		}
		j := strings.IndexByte(msg[i:], ')')
		if j < 0 {
			break
		}
		b.WriteString(msg[:i])
		msg = msg[i+j+1:]
	}
	b.WriteString(msg)
	return b.String()
}

// explain writes an Event for each blocking condition that became True or changed message.
func (c *Controller) explain(before *v1.Namespace, want []v1.NamespaceCondition) {
	if c.recorder == nil {
		return
	}
	for _, w := range want {
		b, ok := blocking[w.Type]
		if !ok || w.Status != v1.ConditionTrue {
			continue
		}
		if i := indexOf(before.Status.Conditions, w.Type); i >= 0 {
			old := before.Status.Conditions[i]
			if old.Status == w.Status && withoutNames(old.Message) == withoutNames(w.Message) {
				continue
			}
		}
		c.recorder.Eventf(before, b.eventType, b.reason, "%s: %s", b.prefix, w.Message)
	}
}
