package poolsource

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clienttesting "k8s.io/client-go/testing"

	fakediscovery "k8s.io/client-go/discovery/fake"

	"github.com/kcm-split/kcm-split/services/servicelb/api/v1alpha1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The pool API is looked for again and again, with backoff: one that appears after the start
// is picked up, and one that goes away is noticed.
func TestWatchPoolAPI(t *testing.T) {
	dc := &switchDiscovery{FakeDiscovery: &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{}}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	changes := make(chan bool, 4)
	go Watch(ctx, dc, v1alpha1.GroupVersionResource, false, func(b bool) { changes <- b })
	time.Sleep(1500 * time.Millisecond)
	dc.served.Store(true)
	if b := waitChange(ctx, changes); b == nil || !*b {
		t.Fatalf("the pool API appearing was not noticed: %v", b)
	}
	dc.served.Store(false)
	if b := waitChange(ctx, changes); b == nil || *b {
		t.Fatalf("the pool API going away was not noticed: %v", b)
	}
}

func waitChange(ctx context.Context, ch <-chan bool) *bool {
	select {
	case b := <-ch:
		return &b
	case <-ctx.Done():
		return nil
	}
}

// switchDiscovery serves the pool API while served is true.
type switchDiscovery struct {
	*fakediscovery.FakeDiscovery
	served atomic.Bool
}

func (d *switchDiscovery) ServerResourcesForGroupVersion(gv string) (*metav1.APIResourceList, error) {
	if !d.served.Load() || gv != v1alpha1.GroupVersionResource.GroupVersion().String() {
		return nil, apierrors.NewNotFound(schema.GroupResource{}, gv)
	}
	return &metav1.APIResourceList{GroupVersion: gv, APIResources: []metav1.APIResource{{Name: v1alpha1.Resource}}}, nil
}
