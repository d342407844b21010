package namespace

import (
	"errors"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
)

// Over 80 lines: one table of cases, each a few lines; splitting it would scatter the cases.
func TestConditions(t *testing.T) {
	widgets := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	failed := &discovery.ErrGroupDiscoveryFailed{Groups: map[schema.GroupVersion]error{{Group: "metrics.example.com", Version: "v1beta1"}: errors.New("stale")}}
	type want struct {
		status v1.ConditionStatus
		reason string
		parts  []string // substrings of the message
	}
	for _, tc := range []struct {
		name string
		rep  func(*report)
		want map[v1.NamespaceConditionType]want
	}{
		{
			name: "all clear",
			rep:  func(*report) {},
			want: map[v1.NamespaceConditionType]want{
				v1.NamespaceDeletionDiscoveryFailure: {v1.ConditionFalse, "ResourcesDiscovered", []string{"All resources successfully discovered"}},
				v1.NamespaceDeletionGVParsingFailure: {v1.ConditionFalse, "ParsedGroupVersions", nil},
				v1.NamespaceDeletionContentFailure:   {v1.ConditionFalse, "ContentDeleted", nil},
				v1.NamespaceContentRemaining:         {v1.ConditionFalse, "ContentRemoved", nil},
				v1.NamespaceFinalizersRemaining:      {v1.ConditionFalse, "ContentHasNoFinalizers", nil},
			},
		},
		{
			name: "partial discovery failure names the group version",
			rep: func(r *report) {
				r.discoveryErr, r.failedGroups = failed, []string{"metrics.example.com/v1beta1"}
			},
			want: map[v1.NamespaceConditionType]want{
				v1.NamespaceDeletionDiscoveryFailure: {v1.ConditionTrue, "DiscoveryFailed", []string{"Discovery failed for some groups, 1 failing", "metrics.example.com/v1beta1"}},
				v1.NamespaceContentRemaining:         {v1.ConditionFalse, "ContentRemoved", nil},
			},
		},
		{
			name: "remaining content with counts and finalizer names",
			rep: func(r *report) {
				r.add(outcome{gvr: podsResource, remaining: 2})
				r.add(outcome{gvr: widgets, remaining: 3, finalizers: map[string]int{"example.com/keep": 3, "example.com/other": 1}})
			},
			want: map[v1.NamespaceConditionType]want{
				v1.NamespaceContentRemaining:    {v1.ConditionTrue, "SomeResourcesRemain", []string{"Some resources are remaining: pods. has 2 resource instances, widgets.example.com has 3 resource instances"}},
				v1.NamespaceFinalizersRemaining: {v1.ConditionTrue, "SomeFinalizersRemain", []string{"example.com/keep in 3 resource instances, example.com/other in 1 resource instances"}},
			},
		},
		{
			name: "the first few remaining objects are named, per resource and per finalizer",
			rep: func(r *report) {
				r.add(outcome{gvr: podsResource, remaining: 1, names: []string{"Pod/web-0"}})
				// Two resources holding the same finalizer: the names merge, sorted, three at most.
				r.add(outcome{gvr: widgets, remaining: 5, names: []string{"Widget/e", "Widget/f", "Widget/g"},
					finalizers: map[string]int{"example.com/keep": 5}, finalizerNames: map[string][]string{"example.com/keep": {"Widget/e", "Widget/f", "Widget/g"}}})
				r.add(outcome{gvr: configMaps, remaining: 1, names: []string{"ConfigMap/a"},
					finalizers: map[string]int{"example.com/keep": 1}, finalizerNames: map[string][]string{"example.com/keep": {"ConfigMap/a"}}})
			},
			want: map[v1.NamespaceConditionType]want{
				v1.NamespaceContentRemaining: {v1.ConditionTrue, "SomeResourcesRemain", []string{
					"configmaps. has 1 resource instances (ConfigMap/a), ",
					"pods. has 1 resource instances (Pod/web-0)",
					"widgets.example.com has 5 resource instances (Widget/e, Widget/f, Widget/g and 2 more)",
				}},
				v1.NamespaceFinalizersRemaining: {v1.ConditionTrue, "SomeFinalizersRemain", []string{"example.com/keep in 6 resource instances (ConfigMap/a, Widget/e, Widget/f and 3 more)"}},
			},
		},
		{
			name: "content and parsing failures",
			rep: func(r *report) {
				r.add(outcome{gvr: widgets, err: errors.New("the server is currently unable to handle the request")})
				r.parseErr = errors.New(`failed to parse group versions: "a/b/c": unexpected GroupVersion string`)
			},
			want: map[v1.NamespaceConditionType]want{
				v1.NamespaceDeletionContentFailure:   {v1.ConditionTrue, "ContentDeletionFailed", []string{"Failed to delete all resource types, 1 remaining: widgets.example.com: the server is currently unable"}},
				v1.NamespaceDeletionGVParsingFailure: {v1.ConditionTrue, "GroupVersionParsingFailed", []string{"a/b/c"}},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := newReport(&snapshot{})
			tc.rep(rep)
			got := rep.conditions()
			if len(got) != 5 {
				t.Fatalf("%d conditions, want all 5", len(got))
			}
			for i, ct := range conditionTypes {
				if got[i].Type != ct {
					t.Fatalf("condition %d is %s, want %s", i, got[i].Type, ct)
				}
			}
			for ct, w := range tc.want {
				c := got[indexOf(got, ct)]
				if c.Status != w.status || c.Reason != w.reason {
					t.Errorf("%s: %s/%s, want %s/%s", ct, c.Status, c.Reason, w.status, w.reason)
				}
				for _, p := range w.parts {
					if !strings.Contains(c.Message, p) {
						t.Errorf("%s message %q lacks %q", ct, c.Message, p)
					}
				}
			}
			if blocked := rep.failure() != nil; blocked != (rep.discoveryErr != nil || rep.parseErr != nil || len(rep.contentErrs) > 0) {
				t.Errorf("failure() = %v", rep.failure())
			}
		})
	}
}

func TestMergeConditionsKeepsTransitionTimes(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	t1 := metav1.NewTime(t0.Add(time.Minute))
	status := v1.NamespaceStatus{Conditions: []v1.NamespaceCondition{{Type: "SomeoneElse", Status: v1.ConditionTrue}}}
	rep := newReport(&snapshot{})
	rep.add(outcome{gvr: podsResource, remaining: 1})
	if !mergeConditions(&status, rep.conditions(), t0) {
		t.Fatal("first merge changed nothing")
	}
	if len(status.Conditions) != 6 || status.Conditions[0].Type != "SomeoneElse" {
		t.Fatalf("other owners' conditions not kept: %+v", status.Conditions)
	}
	// Same report: nothing to write.
	if mergeConditions(&status, rep.conditions(), t1) {
		t.Fatal("merging the same conditions again reported a change")
	}
	// A new message, same status: time kept. A flip: time moves.
	rep2 := newReport(&snapshot{})
	rep2.add(outcome{gvr: podsResource, remaining: 2})
	mergeConditions(&status, rep2.conditions(), t1)
	remaining := status.Conditions[indexOf(status.Conditions, v1.NamespaceContentRemaining)]
	if !remaining.LastTransitionTime.Equal(&t0) || !strings.Contains(remaining.Message, "has 2 resource") {
		t.Fatalf("message change moved the transition time or was lost: %+v", remaining)
	}
	mergeConditions(&status, newReport(&snapshot{}).conditions(), t1)
	remaining = status.Conditions[indexOf(status.Conditions, v1.NamespaceContentRemaining)]
	if remaining.Status != v1.ConditionFalse || !remaining.LastTransitionTime.Equal(&t1) {
		t.Fatalf("flip to False: %+v", remaining)
	}
}

func TestEventsIgnoreWhichObjectsAreNamed(t *testing.T) {
	a := "Some content in the namespace has finalizers remaining: example.com/keep in 6 resource instances (ConfigMap/a, Widget/e, Widget/f and 3 more), example.com/x in 1 resource instances (Pod/p)"
	b := "Some content in the namespace has finalizers remaining: example.com/keep in 6 resource instances (Widget/f, Widget/g, Widget/h and 3 more), example.com/x in 1 resource instances (Pod/q)"
	if withoutNames(a) != withoutNames(b) {
		t.Fatalf("%q != %q", withoutNames(a), withoutNames(b))
	}
	if want := "Some content in the namespace has finalizers remaining: example.com/keep in 6 resource instances, example.com/x in 1 resource instances"; withoutNames(a) != want {
		t.Fatalf("withoutNames = %q, want %q", withoutNames(a), want)
	}
	if c := strings.Replace(b, "in 6", "in 5", 1); withoutNames(a) == withoutNames(c) {
		t.Fatal("a changed count is not a change")
	}
}
