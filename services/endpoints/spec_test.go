package endpointscontroller

import (
	"context"
	"testing"
	"time"

	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/kcm-split/kcm-split/services/endpoints/endpointslice"
	"github.com/kcm-split/kcm-split/services/endpoints/mirroring"
)

// Both slice controllers get the one EndpointSlice informer, which lists exactly the slices
// of the two managed-by values: theirs, and no one else's.
func TestOneSliceInformerForBothSliceControllers(t *testing.T) {
	ours := func(name, managedBy string) *discovery.EndpointSlice {
		return &discovery.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name,
			Labels: map[string]string{discovery.LabelManagedBy: managedBy}}}
	}
	client := fake.NewClientset(ours("a", endpointslice.ManagedBy), ours("b", mirroring.ManagedBy), ours("c", "mesh.example.com"))
	factory := informers.NewSharedInformerFactory(client, 0)
	both := []string{endpointslice.ManagedBy, mirroring.ManagedBy}
	first, second := managedSlices(factory, both), managedSlices(factory, both)
	if first.Informer() != second.Informer() {
		t.Fatal("two EndpointSlice informers in one factory")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), first.Informer().HasSynced) {
		t.Fatal("never synced")
	}
	lists := 0
	for _, a := range client.Actions() {
		if l, ok := a.(clienttesting.ListAction); ok && a.GetResource().Resource == "endpointslices" {
			lists++
			sel := l.GetListRestrictions().Labels
			for _, s := range []*discovery.EndpointSlice{ours("a", endpointslice.ManagedBy), ours("b", mirroring.ManagedBy)} {
				if !sel.Matches(labels.Set(s.Labels)) {
					t.Errorf("selector %q leaves out %s", sel, s.Labels[discovery.LabelManagedBy])
				}
			}
			if sel.Matches(labels.Set(ours("c", "mesh.example.com").Labels)) {
				t.Errorf("selector %q takes in other managers' slices", sel)
			}
		}
	}
	if lists != 1 {
		t.Fatalf("%d EndpointSlice lists, want 1", lists)
	}
}
