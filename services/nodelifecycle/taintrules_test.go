package nodelifecycle

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func cond(t v1.NodeConditionType, s v1.ConditionStatus) v1.NodeCondition {
	return v1.NodeCondition{Type: t, Status: s}
}

func noSchedule(key string) v1.Taint { return v1.Taint{Key: key, Effect: v1.TaintEffectNoSchedule} }

// taintTime is the time the taint rules tests add taints at.
var taintTime = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func stampedAt(key string, at time.Time) v1.Taint {
	t := metav1.NewTime(at)
	return v1.Taint{Key: key, Effect: v1.TaintEffectNoSchedule, TimeAdded: &t}
}

// added is a NoSchedule taint as the controller adds it: stamped with the time (upstream
// stamps every taint it adds; the admission's not-ready taint has no stamp).
func added(key string) v1.Taint {
	at := metav1.NewTime(taintTime)
	return v1.Taint{Key: key, Effect: v1.TaintEffectNoSchedule, TimeAdded: &at}
}

func TestConditionTaints(t *testing.T) {
	custom := v1.Taint{Key: "example.com/gpu", Effect: v1.TaintEffectNoSchedule}
	for _, tc := range []struct {
		name          string
		conds         []v1.NodeCondition
		unschedulable bool
		taints        []v1.Taint
		want          []v1.Taint
		changed       bool
	}{
		{name: "healthy", conds: []v1.NodeCondition{cond(v1.NodeReady, v1.ConditionTrue), cond(v1.NodeMemoryPressure, v1.ConditionFalse)}, want: []v1.Taint{}},
		{name: "ready false", conds: []v1.NodeCondition{cond(v1.NodeReady, v1.ConditionFalse)},
			want: []v1.Taint{added(v1.TaintNodeNotReady)}, changed: true},
		{name: "ready unknown", conds: []v1.NodeCondition{cond(v1.NodeReady, v1.ConditionUnknown)},
			want: []v1.Taint{added(v1.TaintNodeUnreachable)}, changed: true},
		{name: "pressures and network", conds: []v1.NodeCondition{
			cond(v1.NodeReady, v1.ConditionTrue), cond(v1.NodeMemoryPressure, v1.ConditionTrue),
			cond(v1.NodeDiskPressure, v1.ConditionTrue), cond(v1.NodePIDPressure, v1.ConditionTrue),
			cond(v1.NodeNetworkUnavailable, v1.ConditionTrue),
		}, want: []v1.Taint{
			added(v1.TaintNodeDiskPressure), added(v1.TaintNodeMemoryPressure),
			added(v1.TaintNodeNetworkUnavailable), added(v1.TaintNodePIDPressure),
		}, changed: true},
		{name: "pressure unknown is no taint", conds: []v1.NodeCondition{cond(v1.NodeMemoryPressure, v1.ConditionUnknown)}, want: []v1.Taint{}},
		{name: "unschedulable", conds: []v1.NodeCondition{cond(v1.NodeReady, v1.ConditionTrue)}, unschedulable: true,
			want: []v1.Taint{added(v1.TaintNodeUnschedulable)}, changed: true},
		{name: "admission taint lifted, others kept in place", conds: []v1.NodeCondition{cond(v1.NodeReady, v1.ConditionTrue)},
			taints: []v1.Taint{custom, noSchedule(v1.TaintNodeNotReady), notReadyTaint},
			want:   []v1.Taint{custom, notReadyTaint}, changed: true},
		{name: "ready to unknown swaps", conds: []v1.NodeCondition{cond(v1.NodeReady, v1.ConditionUnknown)},
			taints: []v1.Taint{noSchedule(v1.TaintNodeNotReady)},
			want:   []v1.Taint{added(v1.TaintNodeUnreachable)}, changed: true},
		{name: "in line already", conds: []v1.NodeCondition{cond(v1.NodeReady, v1.ConditionUnknown)},
			taints: []v1.Taint{noSchedule(v1.TaintNodeUnreachable), unreachableTaint},
			want:   []v1.Taint{noSchedule(v1.TaintNodeUnreachable), unreachableTaint}},
		// A kept taint keeps its stamp: re-stamping would move "since when" on every write.
		{name: "kept taint keeps its time", conds: []v1.NodeCondition{cond(v1.NodeReady, v1.ConditionUnknown), cond(v1.NodeDiskPressure, v1.ConditionTrue)},
			taints: []v1.Taint{stampedAt(v1.TaintNodeUnreachable, taintTime.Add(-time.Hour))},
			want:   []v1.Taint{stampedAt(v1.TaintNodeUnreachable, taintTime.Add(-time.Hour)), added(v1.TaintNodeDiskPressure)}, changed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &v1.Node{Spec: v1.NodeSpec{Unschedulable: tc.unschedulable, Taints: tc.taints}, Status: v1.NodeStatus{Conditions: tc.conds}}
			got, changed := withNoScheduleTaints(n, taintTime, false)
			if changed != tc.changed {
				t.Errorf("changed = %v, want %v", changed, tc.changed)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("taints (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSwapTaints(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	custom := v1.Taint{Key: "k", Value: "v", Effect: v1.TaintEffectNoExecute}
	got, changed := swapTaints([]v1.Taint{custom, notReadyTaint}, &unreachableTaint, []v1.Taint{notReadyTaint}, now)
	if !changed || len(got) != 2 || got[0] != custom || got[1].Key != v1.TaintNodeUnreachable || !got[1].TimeAdded.Time.Equal(now) {
		t.Errorf("swap = %+v, %v", got, changed)
	}
	if _, changed := swapTaints(got, &unreachableTaint, []v1.Taint{notReadyTaint}, now); changed {
		t.Error("swapping onto a node that has the taint already changed something")
	}
	got, changed = swapTaints(got, nil, []v1.Taint{unreachableTaint, notReadyTaint}, now)
	if !changed || len(got) != 1 || got[0] != custom {
		t.Errorf("removal = %+v, %v", got, changed)
	}
}

// A Node the partition guard holds keeps its Ready taints as they are (none added, none
// removed); its other condition taints follow as usual.
func TestConditionTaintsHeldForReady(t *testing.T) {
	n := &v1.Node{
		Spec: v1.NodeSpec{Taints: []v1.Taint{noSchedule(v1.TaintNodeNotReady)}},
		Status: v1.NodeStatus{Conditions: []v1.NodeCondition{
			cond(v1.NodeReady, v1.ConditionUnknown), cond(v1.NodeDiskPressure, v1.ConditionTrue),
		}},
	}
	got, changed := withNoScheduleTaints(n, taintTime, true)
	want := []v1.Taint{noSchedule(v1.TaintNodeNotReady), added(v1.TaintNodeDiskPressure)}
	if diff := cmp.Diff(want, got); diff != "" || !changed {
		t.Errorf("held taints (-want +got):\n%s (changed %v)", diff, changed)
	}
	n.Status.Conditions = n.Status.Conditions[:1]
	if got, changed := withNoScheduleTaints(n, taintTime, true); changed {
		t.Errorf("held node with nothing else to change: %+v", got)
	}
}
