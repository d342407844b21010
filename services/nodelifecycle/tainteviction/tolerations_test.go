package tainteviction

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

var unreachableTaint = v1.Taint{Key: v1.TaintNodeUnreachable, Effect: v1.TaintEffectNoExecute}

func TestTolerationDeadline(t *testing.T) {
	secs := func(s int64) *int64 { return &s }
	tol := func(key string, effect v1.TaintEffect, s *int64) v1.Toleration {
		return v1.Toleration{Key: key, Operator: v1.TolerationOpExists, Effect: effect, TolerationSeconds: s}
	}
	other := v1.Taint{Key: "example.com/maintenance", Effect: v1.TaintEffectNoExecute}
	for _, tc := range []struct {
		name               string
		taints             []v1.Taint
		tolerations        []v1.Toleration
		tolerated, forever bool
		after              time.Duration
	}{
		{name: "no taints", tolerated: true, forever: true},
		{name: "no tolerations", taints: []v1.Taint{unreachableTaint}},
		{name: "tolerated for ever", taints: []v1.Taint{unreachableTaint},
			tolerations: []v1.Toleration{tol(v1.TaintNodeUnreachable, v1.TaintEffectNoExecute, nil)}, tolerated: true, forever: true},
		{name: "tolerated 10 s", taints: []v1.Taint{unreachableTaint},
			tolerations: []v1.Toleration{tol(v1.TaintNodeUnreachable, v1.TaintEffectNoExecute, secs(10))}, tolerated: true, after: 10 * time.Second},
		{name: "zero seconds means at once", taints: []v1.Taint{unreachableTaint},
			tolerations: []v1.Toleration{tol(v1.TaintNodeUnreachable, v1.TaintEffectNoExecute, secs(0))}, tolerated: true},
		{name: "negative seconds mean at once", taints: []v1.Taint{unreachableTaint},
			tolerations: []v1.Toleration{tol(v1.TaintNodeUnreachable, v1.TaintEffectNoExecute, secs(-5))}, tolerated: true},
		{name: "wrong key", taints: []v1.Taint{unreachableTaint},
			tolerations: []v1.Toleration{tol(v1.TaintNodeNotReady, v1.TaintEffectNoExecute, nil)}},
		{name: "NoSchedule toleration does not tolerate NoExecute", taints: []v1.Taint{unreachableTaint},
			tolerations: []v1.Toleration{tol(v1.TaintNodeUnreachable, v1.TaintEffectNoSchedule, nil)}},
		{name: "wildcard toleration", taints: []v1.Taint{unreachableTaint, other},
			tolerations: []v1.Toleration{{Operator: v1.TolerationOpExists}}, tolerated: true, forever: true},
		{name: "smallest of the tolerations used", taints: []v1.Taint{unreachableTaint, other},
			tolerations: []v1.Toleration{
				tol(v1.TaintNodeUnreachable, v1.TaintEffectNoExecute, secs(300)),
				tol(other.Key, v1.TaintEffectNoExecute, secs(30)),
			}, tolerated: true, after: 30 * time.Second},
		{name: "one taint of two untolerated", taints: []v1.Taint{unreachableTaint, other},
			tolerations: []v1.Toleration{tol(v1.TaintNodeUnreachable, v1.TaintEffectNoExecute, nil)}},
		{name: "first matching toleration wins, as upstream", taints: []v1.Taint{unreachableTaint},
			tolerations: []v1.Toleration{
				tol(v1.TaintNodeUnreachable, v1.TaintEffectNoExecute, nil),
				tol(v1.TaintNodeUnreachable, v1.TaintEffectNoExecute, secs(5)),
			}, tolerated: true, forever: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tolerated, forever, after := tolerationDeadline(tc.taints, tc.tolerations)
			if tolerated != tc.tolerated || forever != tc.forever || after != tc.after {
				t.Errorf("= (%v, %v, %s), want (%v, %v, %s)", tolerated, forever, after, tc.tolerated, tc.forever, tc.after)
			}
		})
	}
}
