package nodelifecycle

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
)

func cond(t v1.NodeConditionType, s v1.ConditionStatus) v1.NodeCondition {
	return v1.NodeCondition{Type: t, Status: s}
}

func noSchedule(key string) v1.Taint { return v1.Taint{Key: key, Effect: v1.TaintEffectNoSchedule} }

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
			want: []v1.Taint{noSchedule(v1.TaintNodeNotReady)}, changed: true},
		{name: "ready unknown", conds: []v1.NodeCondition{cond(v1.NodeReady, v1.ConditionUnknown)},
			want: []v1.Taint{noSchedule(v1.TaintNodeUnreachable)}, changed: true},
		{name: "pressures and network", conds: []v1.NodeCondition{
			cond(v1.NodeReady, v1.ConditionTrue), cond(v1.NodeMemoryPressure, v1.ConditionTrue),
			cond(v1.NodeDiskPressure, v1.ConditionTrue), cond(v1.NodePIDPressure, v1.ConditionTrue),
			cond(v1.NodeNetworkUnavailable, v1.ConditionTrue),
		}, want: []v1.Taint{
			noSchedule(v1.TaintNodeDiskPressure), noSchedule(v1.TaintNodeMemoryPressure),
			noSchedule(v1.TaintNodeNetworkUnavailable), noSchedule(v1.TaintNodePIDPressure),
		}, changed: true},
		{name: "pressure unknown is no taint", conds: []v1.NodeCondition{cond(v1.NodeMemoryPressure, v1.ConditionUnknown)}, want: []v1.Taint{}},
		{name: "unschedulable", conds: []v1.NodeCondition{cond(v1.NodeReady, v1.ConditionTrue)}, unschedulable: true,
			want: []v1.Taint{noSchedule(v1.TaintNodeUnschedulable)}, changed: true},
		{name: "admission taint lifted, others kept in place", conds: []v1.NodeCondition{cond(v1.NodeReady, v1.ConditionTrue)},
			taints: []v1.Taint{custom, noSchedule(v1.TaintNodeNotReady), notReadyTaint},
			want:   []v1.Taint{custom, notReadyTaint}, changed: true},
		{name: "ready to unknown swaps", conds: []v1.NodeCondition{cond(v1.NodeReady, v1.ConditionUnknown)},
			taints: []v1.Taint{noSchedule(v1.TaintNodeNotReady)},
			want:   []v1.Taint{noSchedule(v1.TaintNodeUnreachable)}, changed: true},
		{name: "in line already", conds: []v1.NodeCondition{cond(v1.NodeReady, v1.ConditionUnknown)},
			taints: []v1.Taint{noSchedule(v1.TaintNodeUnreachable), unreachableTaint},
			want:   []v1.Taint{noSchedule(v1.TaintNodeUnreachable), unreachableTaint}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &v1.Node{Spec: v1.NodeSpec{Unschedulable: tc.unschedulable, Taints: tc.taints}, Status: v1.NodeStatus{Conditions: tc.conds}}
			got, changed := withNoScheduleTaints(n)
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
