package informer

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
)

func names(svcs []*v1.Service) []string {
	out := make([]string, 0, len(svcs))
	for _, s := range svcs {
		out = append(out, s.Namespace+"/"+s.Name)
	}
	slices.Sort(out)
	return out
}

// TestSelectingServicesFindsWhatTheScanFinds: over random selectors (nil, empty, one to three
// pairs) and random Pod labels, the index returns exactly the Services a scan of the
// namespace matches, each once, and keeps doing so after selectors change and Services go.
// Over 80 lines: one random run, its three phases (create, change, delete) checked against the scan in turn.
func TestSelectingServicesFindsWhatTheScanFinds(t *testing.T) {
	factory := informers.NewSharedInformerFactory(fake.NewClientset(), 0)
	inf := factory.Core().V1().Services().Informer()
	indexed := SelectingServices(inf)
	if _, ok := indexed.(indexedServices); !ok {
		t.Fatalf("SelectingServices on an unstarted informer = %T, want the index", indexed)
	}
	if _, ok := SelectingServices(inf).(indexedServices); !ok {
		t.Fatal("a second caller on the same informer does not share the index")
	}
	scan := scanningServices{factory.Core().V1().Services().Lister()}
	store := inf.GetIndexer()
	r := rand.New(rand.NewPCG(7, 11))
	keys := []string{"app", "tier", "track", "zone"}
	randomLabels := func(max int) map[string]string {
		m := map[string]string{}
		for range r.IntN(max + 1) {
			m[keys[r.IntN(len(keys))]] = fmt.Sprintf("v%d", r.IntN(3))
		}
		return m
	}
	service := func(ns string, i int) *v1.Service {
		svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("s%d", i)}}
		switch r.IntN(6) {
		case 0: // nil: selects nothing
		case 1:
			svc.Spec.Selector = map[string]string{} // empty: selects every Pod
		default:
			svc.Spec.Selector = randomLabels(3)
			if len(svc.Spec.Selector) == 0 {
				svc.Spec.Selector = map[string]string{"app": "v0"}
			}
		}
		return svc
	}
	check := func(round string) {
		t.Helper()
		matched := 0
		for range 300 {
			ns := []string{"x", "y"}[r.IntN(2)]
			podLabels := randomLabels(4)
			got, err := indexed.Selecting(ns, podLabels)
			if err != nil {
				t.Fatal(err)
			}
			want, err := scan.Selecting(ns, podLabels)
			if err != nil {
				t.Fatal(err)
			}
			if g, w := names(got), names(want); !slices.Equal(g, w) {
				t.Fatalf("%s: Pod %s %v: index %v, scan %v", round, ns, podLabels, g, w)
			}
			matched += len(want)
		}
		if matched == 0 {
			t.Fatalf("%s: no Pod matched any Service: the comparison proves nothing", round)
		}
	}
	for i := range 60 {
		if err := store.Add(service([]string{"x", "y"}[i%2], i)); err != nil {
			t.Fatal(err)
		}
	}
	check("added")
	for i := range 60 {
		if i%3 == 0 {
			if err := store.Update(service([]string{"x", "y"}[i%2], i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	check("selectors changed")
	for i := range 60 {
		if i%4 == 0 {
			if err := store.Delete(&v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: []string{"x", "y"}[i%2], Name: fmt.Sprintf("s%d", i)}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	check("some deleted")
}

// TestSelectingServicesMatchesSelectorSemantics pins the cases by hand: a nil selector selects
// nothing, an empty one everything in its namespace only, a Pod must carry every pair.
func TestSelectingServicesMatchesSelectorSemantics(t *testing.T) {
	factory := informers.NewSharedInformerFactory(fake.NewClientset(), 0)
	inf := factory.Core().V1().Services().Informer()
	sel := SelectingServices(inf)
	for _, s := range []*v1.Service{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "none"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "all"}, Spec: v1.ServiceSpec{Selector: map[string]string{}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "y", Name: "all"}, Spec: v1.ServiceSpec{Selector: map[string]string{}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "web"}, Spec: v1.ServiceSpec{Selector: map[string]string{"app": "web", "tier": "fe"}}},
	} {
		if err := inf.GetIndexer().Add(s); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		labels map[string]string
		want   []string
	}{
		{nil, []string{"x/all"}},
		{map[string]string{"app": "web"}, []string{"x/all"}},
		{map[string]string{"app": "web", "tier": "fe", "extra": "1"}, []string{"x/all", "x/web"}},
		{map[string]string{"app": "web", "tier": "be"}, []string{"x/all"}},
	} {
		got, err := sel.Selecting("x", tc.labels)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(names(got), tc.want) {
			t.Errorf("Pod %v: got %v, want %v", tc.labels, names(got), tc.want)
		}
	}
}
