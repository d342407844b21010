// Package informer holds what every controller does around its shared informers: register
// event handlers and tell when they have seen every listed object, keep fields no controller
// reads out of the caches, and run the controller between starting the informers and waiting
// for their goroutines to end.
package informer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// Handlers collects a controller's event-handler registrations. The zero value is ready to
// use. A registration that fails is remembered rather than returned, so a constructor can
// register all its handlers in a row; Err reports the failures and HasSynced stays false.
type Handlers struct {
	synced []cache.InformerSynced
	// checkers are the registrations' own sync signals (a channel each), so that WaitSynced
	// wakes the moment they sync; steps added by Track are polled.
	checkers []cache.DoneChecker
	tracked  []cache.InformerSynced
	err      error
}

// Add registers h on inf.
func (hs *Handlers) Add(inf cache.SharedInformer, h cache.ResourceEventHandler) {
	r, err := inf.AddEventHandler(h)
	hs.track(r, err)
}

// AddWithResync registers h on inf with its own resync period.
func (hs *Handlers) AddWithResync(inf cache.SharedInformer, h cache.ResourceEventHandler, resync time.Duration) {
	r, err := inf.AddEventHandlerWithResyncPeriod(h, resync)
	hs.track(r, err)
}

func (hs *Handlers) track(r cache.ResourceEventHandlerRegistration, err error) {
	if err != nil {
		hs.Track(nil, err)
		return
	}
	// A registration is synced once its informer has listed and this handler has been given
	// every listed object: only then can a first full pass miss nothing.
	hs.synced = append(hs.synced, r.HasSynced)
	hs.checkers = append(hs.checkers, r.HasSyncedChecker())
}

// Track adds what another kind of setup step came to: a sync check to wait for (nil for
// none), or its failure.
func (hs *Handlers) Track(synced cache.InformerSynced, err error) {
	if err != nil {
		hs.err = errors.Join(hs.err, err)
		return
	}
	if synced != nil {
		hs.synced = append(hs.synced, synced)
		hs.tracked = append(hs.tracked, synced)
	}
}

// Err is every registration failure, or nil.
func (hs *Handlers) Err() error { return hs.err }

// HasSynced reports whether every registration is synced; false while any failed.
func (hs *Handlers) HasSynced() bool {
	if hs.err != nil {
		return false
	}
	for _, synced := range hs.synced {
		if !synced() {
			return false
		}
	}
	return true
}

// Synced lists the registrations' sync checks, for cache.WaitForNamedCacheSyncWithContext.
func (hs *Handlers) Synced() []cache.InformerSynced { return hs.synced }

// trackedPoll is how often WaitSynced asks the steps added by Track.
const trackedPoll = 5 * time.Millisecond

// WaitSynced blocks until every registration and tracked step has synced, and reports
// whether they did before ctx ended. It logs "Waiting for caches to sync" and "Caches are
// synced" as client-go's WaitForNamedCacheSyncWithContext does, but wakes when the last
// registration syncs instead of at client-go's next 100 ms poll: after a handover the new
// leader starts writing up to 100 ms earlier (the time without a writer in shared/README.md).
func (hs *Handlers) WaitSynced(ctx context.Context) bool {
	logger := klog.FromContext(ctx)
	logger.Info("Waiting for caches to sync")
	if !cache.WaitFor(ctx, "", hs.checkers...) {
		return false
	}
	err := wait.PollUntilContextCancel(ctx, trackedPoll, true, func(context.Context) (bool, error) {
		for _, synced := range hs.tracked {
			if !synced() {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return false
	}
	logger.Info("Caches are synced")
	return true
}

// RunWhenSynced is the frame of every controller's Run: it refuses to start when a
// registration failed, logs "Starting <name>" with keysAndValues and "Shutting down <name>"
// on return, waits until every registration has synced and then runs run. A ctx that ends
// before the caches sync ends the run without error: the term is over, nothing failed.
func (hs *Handlers) RunWhenSynced(ctx context.Context, name string, run func(context.Context) error, keysAndValues ...any) error {
	if hs.err != nil {
		return fmt.Errorf("registering event handlers: %w", hs.err)
	}
	logger := klog.FromContext(ctx)
	logger.Info("Starting "+name, keysAndValues...)
	defer logger.Info("Shutting down " + name)
	if !hs.WaitSynced(ctx) {
		return nil
	}
	return run(ctx)
}

// KeptMeta is the metadata every projected cache keeps of an object: identity (for keys,
// owner references and Events), the resourceVersion (the informer tells updates from resyncs
// by it), creation and deletion. A projection adds what its controller reads besides.
func KeptMeta(m *metav1.ObjectMeta) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:                       m.Name,
		Namespace:                  m.Namespace,
		UID:                        m.UID,
		ResourceVersion:            m.ResourceVersion,
		CreationTimestamp:          m.CreationTimestamp,
		DeletionTimestamp:          m.DeletionTimestamp,
		DeletionGracePeriodSeconds: m.DeletionGracePeriodSeconds,
	}
}

// DropManagedFields is an informer transform that removes managedFields: no controller here
// reads them, and on thousands of objects they are a large share of a cache's memory.
func DropManagedFields(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil && m.GetManagedFields() != nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// Factory is what Run needs of an informer factory: the typed, metadata and dynamic
// factories of client-go all have it.
type Factory interface {
	Start(stopCh <-chan struct{})
	Shutdown()
}

// Run starts the factories' informers, then calls run with a context that ends when ctx
// does or run returns. Before it returns it stops the informers and waits for their
// goroutines, so that a leader releases its Lease only once nothing of it is left running.
// Informers a factory hands out later are started by calling its Start again.
func Run(ctx context.Context, run func(context.Context) error, factories ...Factory) error {
	ctx, cancel := context.WithCancel(ctx)
	defer func() {
		cancel()
		for _, f := range factories {
			f.Shutdown()
		}
	}()
	for _, f := range factories {
		f.Start(ctx.Done())
	}
	return run(ctx)
}
