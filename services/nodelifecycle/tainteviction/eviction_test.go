package tainteviction

import (
	"context"
	"errors"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kcm-split/kcm-split/shared/testenv/fixtures"
	"github.com/kcm-split/kcm-split/shared/worker"
)

func tolerating(name string, seconds *int64) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("u-" + name)},
		Spec: v1.PodSpec{NodeName: "n"}}
	if seconds != nil {
		p.Spec.Tolerations = []v1.Toleration{{Key: v1.TaintNodeUnreachable, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute, TolerationSeconds: seconds}}
	}
	return p
}

// A Pod tolerating 10 s is deleted once 10 s have passed since the controller first saw it
// untolerated, not before; the eviction is checked again when due.
func TestEvictionAfterToleration(t *testing.T) {
	ctx := context.Background()
	ten := int64(10)
	node := taintedNode()
	pod := tolerating("ten", &ten)
	f := newFixture(t, node, pod)
	c := f.c
	c.decide(ctx, pod, noExecuteTaints(node))

	f.step(9 * time.Second)
	var rq *worker.Requeue
	if err := c.evict(ctx, "ns/ten"); !errors.As(err, &rq) || rq.After != time.Second {
		t.Fatalf("evict before the deadline = %v, want a requeue after 1s", err)
	}
	// A node update (taints unchanged) does not move the deadline.
	c.decide(ctx, pod, noExecuteTaints(node))
	f.step(time.Second)
	if err := c.evict(ctx, "ns/ten"); err != nil {
		t.Fatal(err)
	}
	if w := f.writes(); len(w) != 2 || w[0] != "patch pods/status ten" || w[1] != "delete pods ten" {
		t.Errorf("writes = %v, want the DisruptionTarget patch and the delete", w)
	}
	if !hasEvent(fixtures.Events(f.recorder), "TaintManagerEviction Marking for deletion Pod ns/ten") {
		t.Error("no eviction event")
	}
	// Done: nothing scheduled any more.
	if err := c.evict(ctx, "ns/ten"); err != nil || len(f.writes()) != 2 {
		t.Errorf("a second evict wrote again: %v %v", err, f.writes())
	}
}

// Removing the taint before the deadline cancels the eviction, with an Event; a Pod
// tolerating for ever is never scheduled; a Pod being deleted is left alone.
func TestEvictionCancelledAndSkipped(t *testing.T) {
	ctx := context.Background()
	ten := int64(10)
	node := taintedNode()
	pod := tolerating("ten", &ten)
	forever := tolerating("forever", nil)
	forever.Spec.Tolerations = []v1.Toleration{{Key: v1.TaintNodeUnreachable, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute}}
	deleting := tolerating("deleting", nil)
	deleting.DeletionTimestamp = &metav1.Time{Time: t0}
	f := newFixture(t, node, pod, forever, deleting)
	c := f.c
	for _, p := range []*v1.Pod{pod, forever, deleting} {
		c.decide(ctx, p, noExecuteTaints(node))
	}
	if len(c.scheduled) != 1 {
		t.Fatalf("scheduled = %v, want only ten", c.scheduled)
	}
	c.decide(ctx, pod, nil) // taint gone
	if !hasEvent(fixtures.Events(f.recorder), "TaintManagerEviction Cancelling deletion of Pod ns/ten") {
		t.Error("no cancellation event")
	}
	f.step(time.Minute)
	for _, k := range []string{"ns/ten", "ns/forever", "ns/deleting"} {
		if err := c.evict(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	if w := f.writes(); len(w) != 0 {
		t.Errorf("writes = %v, want none", w)
	}
}
