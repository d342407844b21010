package nodelifecycle

import (
	"context"
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kcm-split/kcm-split/shared/app"
	"github.com/kcm-split/kcm-split/shared/foreign"
)

// KubeletManager is the kubelet's field manager: it writes the Node conditions this
// controller marks Unknown (that is how a Node comes back), and registers its Node with
// taints; it is never a second owner of them.
const KubeletManager = "kubelet"

// foreignWriters notices another writer of what this controller owns on Nodes
// (shared/foreign), typically kube-controller-manager's node lifecycle controller left
// running: the taints it manages (taintrules.go's keys, NoSchedule and NoExecute) and the
// conditions it marks Unknown when a kubelet falls silent. Both are told by a change from the
// Node's previous version (the informer's cache, read in the transform before the cache is
// updated) whose field is now owned by another field manager: taints are one atomic list
// owned whole by its last writer, so a manager owning it says nothing by itself (kubectl
// taint and cloud providers write other taints), and a Node's creator owns the taints
// admission gave it. Each is reported once per episode: an Event on the Node, a log line,
// kcm_split_foreign_writer_detected_total{controller="node-lifecycle-controller"}. It only
// observes: the controller writes what it would without it.
type foreignWriters struct {
	d *foreign.Detector
	t *foreign.Target
	// nodes is the Node informer's cache: the version before the one being transformed. Set
	// before the informers start; nil observes nothing.
	nodes cache.Store
}

func newForeignWriters(ctx context.Context, rt *app.Runtime) *foreignWriters {
	d := foreign.New(foreign.Options{
		Ours:       []string{ControllerID},
		Ignored:    append(foreign.IgnoredManagers(), KubeletManager),
		Registerer: rt.ProcessRegistry, // where Spec's ProcessMetrics made the series
		Logger:     klog.FromContext(ctx),
	})
	t := d.Track(&foreign.Target{
		Controller: Name,
		Recorder:   rt.EventRecorder(ctx, ComponentName),
	})
	// Episodes in progress outlive the term: the next Lease holder continues them.
	if err := d.KeepBesideLease(ctx, rt.Client.CoreV1().ConfigMaps(rt.LeaseNamespace), rt.LeaseName, ControllerID); err != nil {
		klog.FromContext(ctx).Error(err, "Foreign-writer episodes are not kept for the next Lease holder")
	}
	return &foreignWriters{d: d, t: t}
}

// transform shows each Node to the detector, then projects it as cacheTransform does
// (managedFields dropped).
func (f *foreignWriters) transform(obj any) (any, error) {
	if node, ok := obj.(*v1.Node); ok {
		f.observe(node)
	}
	return cacheTransform(obj)
}

func (f *foreignWriters) observe(node *v1.Node) {
	if f.nodes == nil || len(node.ManagedFields) == 0 {
		return
	}
	cached, ok, err := f.nodes.GetByKey(node.Name)
	if err != nil || !ok {
		return // first seen: what it was created with is its creator's
	}
	prev, ok := cached.(*v1.Node)
	if !ok || prev.UID != node.UID {
		return
	}
	if changed := nodeChanges(prev, node); len(changed) > 0 {
		f.d.ObserveChange(f.t, node, changed)
	}
}

// nodeChanges lists the paths of the fields this controller writes whose value differs
// between prev and cur: the taints when those of taintrules.go's keys differ (keys and
// effects), and each condition it marks Unknown whose status or reason differs.
func nodeChanges(prev, cur *v1.Node) [][]string {
	var out [][]string
	if ownTaints(prev) != ownTaints(cur) {
		out = append(out, []string{"spec", "taints"})
	}
	for _, ct := range unknownConditionTypes {
		p, c := condition(prev, ct), condition(cur, ct)
		key := fmt.Sprintf(`k:{"type":%q}`, ct)
		if p.Status != c.Status {
			out = append(out, []string{"status", "conditions", key, "status"})
		}
		if p.Reason != c.Reason {
			out = append(out, []string{"status", "conditions", key, "reason"})
		}
	}
	return out
}

// ownTaints is the set of this controller's taints on node (its NoSchedule keys, the
// not-ready and unreachable NoExecute ones), as a comparable string.
func ownTaints(node *v1.Node) string {
	var own []string
	for _, t := range node.Spec.Taints {
		if (t.Effect == v1.TaintEffectNoSchedule && noScheduleTaintKeys[t.Key]) || t.MatchTaint(&unreachableTaint) || t.MatchTaint(&notReadyTaint) {
			own = append(own, t.Key+":"+string(t.Effect))
		}
	}
	slices.Sort(own)
	return strings.Join(own, ",")
}

func condition(node *v1.Node, ct v1.NodeConditionType) v1.NodeCondition {
	for _, c := range node.Status.Conditions {
		if c.Type == ct {
			return c
		}
	}
	return v1.NodeCondition{}
}
