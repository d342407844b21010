package informer

import (
	"fmt"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
)

// TestSelectingPodsListsWhatTheScanLists: for every kind of selector, the indexed lister
// returns exactly the Pods the plain lister does, after adds, label changes and deletes.
func TestSelectingPodsListsWhatTheScanLists(t *testing.T) {
	factory := informers.NewSharedInformerFactory(fake.NewClientset(), 0)
	inf := factory.Core().V1().Pods().Informer()
	indexed, err := SelectingPods(inf)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := SelectingPods(inf); err != nil {
		t.Fatalf("a second lister on the same informer: %v", err)
	}
	plain := factory.Core().V1().Pods().Lister()
	store := inf.GetIndexer()
	pod := func(ns, name string, lbls map[string]string) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: lbls}}
	}
	for i := range 30 {
		lbls := map[string]string{"app": fmt.Sprintf("a%d", i%3), "tier": fmt.Sprintf("t%d", i%2)}
		if i%5 == 0 {
			lbls = nil
		}
		if err := store.Add(pod([]string{"x", "y"}[i%2], fmt.Sprintf("p%d", i), lbls)); err != nil {
			t.Fatal(err)
		}
	}
	// A label change moves a Pod between index entries; a delete removes it.
	if err := store.Update(pod("x", "p2", map[string]string{"app": "a1", "tier": "t0"})); err != nil {
		t.Fatal(err)
	}
	if err := store.Delete(pod("y", "p1", nil)); err != nil {
		t.Fatal(err)
	}
	selectors := []string{"app=a1", "app=a1,tier=t0", "app==a2", "app in (a0)", "app in (a0,a1)", "app!=a1", "tier", "!tier", "", "app=none"}
	names := func(ps []*v1.Pod) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.Namespace+"/"+p.Name)
		}
		slices.Sort(out)
		return out
	}
	for _, ns := range []string{"x", "y", "z"} {
		for _, s := range selectors {
			sel, err := labels.Parse(s)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := plain.Pods(ns).List(sel)
			got, err := indexed.Pods(ns).List(sel)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(names(got), names(want)) {
				t.Errorf("ns %s, selector %q: indexed %v, scan %v", ns, s, names(got), names(want))
			}
		}
	}
	sel := labels.SelectorFromValidatedSet(labels.Set{"app": "a1"})
	if got, _ := indexed.Pods("x").List(sel); len(got) == 0 {
		t.Fatal("the fixture selects nothing; the comparison proves little")
	}
}
