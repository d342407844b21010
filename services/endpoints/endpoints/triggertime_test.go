package endpoints

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcm-split/kcm-split/services/endpoints/internal/testobj"
)

// Over 80 lines: one table of steps run in order on one tracker, each step depending on the ones before.
func TestTriggerTracker(t *testing.T) {
	t0 := testobj.Created.Time
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	readyAt := func(d time.Duration) func(*v1.Pod) {
		return func(p *v1.Pod) { p.Status.Conditions[0].LastTransitionTime = metav1.NewTime(at(d)) }
	}
	svc := testobj.Service("s")

	tr := newTriggerTracker()
	sync := func(pods ...*v1.Pod) time.Time { return tr.compute(svc, pods) }

	steps := []struct {
		name string
		pods []*v1.Pod
		want time.Time
	}{
		{
			name: "first sync reports the service's creation",
			pods: []*v1.Pod{testobj.Pod("a", "10.1.0.1", true, readyAt(time.Minute))},
			want: t0,
		},
		{
			name: "nothing changed",
			pods: []*v1.Pod{testobj.Pod("a", "10.1.0.1", true, readyAt(time.Minute))},
			want: time.Time{},
		},
		{
			name: "earliest of the changed pods",
			pods: []*v1.Pod{
				testobj.Pod("a", "10.1.0.1", true, readyAt(3*time.Minute)),
				testobj.Pod("b", "10.1.0.2", true, readyAt(2*time.Minute)),
			},
			want: at(2 * time.Minute),
		},
		{
			name: "unchanged pods do not count, a changed one does",
			pods: []*v1.Pod{
				testobj.Pod("a", "10.1.0.1", true, readyAt(3*time.Minute)),
				testobj.Pod("b", "10.1.0.2", false, readyAt(5*time.Minute)),
			},
			want: at(5 * time.Minute),
		},
		{
			name: "a removed pod leaves no trigger time",
			pods: []*v1.Pod{testobj.Pod("a", "10.1.0.1", true, readyAt(3*time.Minute))},
			want: time.Time{},
		},
		{
			name: "a pod without a Ready condition is ignored",
			pods: []*v1.Pod{
				testobj.Pod("a", "10.1.0.1", true, readyAt(3*time.Minute)),
				testobj.Pod("c", "10.1.0.3", false, func(p *v1.Pod) { p.Status.Conditions = nil }),
			},
			want: time.Time{},
		},
	}
	for _, s := range steps {
		if got := sync(s.pods...); !got.Equal(s.want) {
			t.Fatalf("%s: trigger time = %v, want %v", s.name, got, s.want)
		}
	}

	t.Run("a failed sync's trigger is reported again", func(t *testing.T) {
		pods := []*v1.Pod{testobj.Pod("a", "10.1.0.1", true, readyAt(9*time.Minute))}
		first := tr.compute(svc, pods)
		tr.retry(svc.Namespace, svc.Name, first) // the sync failed
		second := tr.compute(svc, pods)
		third := tr.compute(svc, pods) // the retry succeeded: nothing left to report
		if !first.Equal(at(9*time.Minute)) || !second.Equal(first) || !third.IsZero() {
			t.Errorf("trigger times %v, %v, %v; want %v twice, then none", first, second, third, at(9*time.Minute))
		}
	})

	t.Run("a failed sync's trigger wins over a later change", func(t *testing.T) {
		first := tr.compute(svc, []*v1.Pod{testobj.Pod("a", "10.1.0.1", true, readyAt(10*time.Minute))})
		tr.retry(svc.Namespace, svc.Name, first)
		second := tr.compute(svc, []*v1.Pod{testobj.Pod("a", "10.1.0.1", false, readyAt(11*time.Minute))})
		if !second.Equal(at(10 * time.Minute)) {
			t.Errorf("trigger time = %v, want the failed sync's %v", second, at(10*time.Minute))
		}
	})

	t.Run("a recreated service starts afresh", func(t *testing.T) {
		later := testobj.Service("s", func(s *v1.Service) { s.CreationTimestamp = metav1.NewTime(at(time.Hour)) })
		tr.retry(svc.Namespace, svc.Name, at(12*time.Minute)) // a failure of the old one is forgotten too
		tr.forget(svc.Namespace, svc.Name)
		got := tr.compute(later, nil)
		if !got.Equal(at(time.Hour)) {
			t.Errorf("trigger time = %v, want the new creation time %v", got, at(time.Hour))
		}
	})
}
