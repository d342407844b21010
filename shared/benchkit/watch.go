package benchkit

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Inform starts the benchmark's own informer on the resource pick selects (in namespace ns,
// or all when ns is ""), calls handle for every add, update and delete (deleted set, a
// tombstone unwrapped), and returns once it has synced. Latencies are taken inside handle, when
// the informer delivers the event: both sides and the floor are then observed the same way.
// The informer stops when ctx is done or tb ends.
func Inform(ctx context.Context, tb testing.TB, client kubernetes.Interface, ns string, pick func(informers.SharedInformerFactory) cache.SharedIndexInformer, handle func(obj any, deleted bool)) {
	tb.Helper()
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(ns))
	inf := pick(factory)
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { handle(obj, false) },
		UpdateFunc: func(_, obj any) { handle(obj, false) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			handle(obj, true)
		},
	})
	if err != nil {
		tb.Fatal(err)
	}
	factory.Start(ctx.Done())
	tb.Cleanup(factory.Shutdown)
	syncCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), inf.HasSynced) {
		tb.Fatal("the benchmark's own informer never synced")
	}
}

// Observer mirrors one resource through an informer and tells waiters when the mirror first
// satisfies their condition, with the time the informer delivered the event that made it so.
// Waiters register before the write they wait for, so no event can slip between.
type Observer[T metav1.Object] struct {
	mu      sync.Mutex
	objs    map[string]T
	waiters []*waiter[T]
}

type waiter[T metav1.Object] struct {
	key string       // "" means the condition is on all objects, or on any one (some)
	one func(T) bool // when key != ""
	all func(map[string]T) bool
	// some, when set, holds once any one object satisfies it: only the object an event
	// changed is evaluated, so it stays cheap over thousands of objects.
	some func(T) bool
	ch   chan time.Time // buffered: firing never blocks the informer
}

// NewObserver starts an Observer of the resource pick selects, in namespace ns ("" for all),
// and returns once it has synced.
func NewObserver[T metav1.Object](ctx context.Context, tb testing.TB, client kubernetes.Interface, ns string, pick func(informers.SharedInformerFactory) cache.SharedIndexInformer) *Observer[T] {
	tb.Helper()
	o := &Observer[T]{objs: map[string]T{}}
	Inform(ctx, tb, client, ns, pick, o.observe)
	return o
}

func (o *Observer[T]) observe(obj any, deleted bool) {
	at := time.Now()
	t, ok := obj.(T)
	if !ok {
		return
	}
	key := t.GetNamespace() + "/" + t.GetName()
	o.mu.Lock()
	defer o.mu.Unlock()
	if deleted {
		delete(o.objs, key)
	} else {
		o.objs[key] = t
	}
	o.waiters = slices.DeleteFunc(o.waiters, func(w *waiter[T]) bool {
		if w.key != "" && w.key != key {
			return false
		}
		if w.some != nil {
			if obj, ok := o.objs[key]; !ok || !w.some(obj) {
				return false
			}
		} else if !o.holds(w) {
			return false
		}
		w.ch <- at
		return true
	})
}

// holds evaluates w under o.mu.
func (o *Observer[T]) holds(w *waiter[T]) bool {
	if w.some != nil {
		for _, obj := range o.objs {
			if w.some(obj) {
				return true
			}
		}
		return false
	}
	if w.key == "" {
		return w.all(o.objs)
	}
	obj, ok := o.objs[w.key]
	return ok && w.one(obj)
}

func (o *Observer[T]) register(w *waiter[T]) <-chan time.Time {
	w.ch = make(chan time.Time, 1)
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.holds(w) {
		// Already true: the caller registered too late to time it; say "now".
		w.ch <- time.Now()
	} else {
		o.waiters = append(o.waiters, w)
	}
	return w.ch
}

// When fires once the object key ("namespace/name") satisfies cond.
func (o *Observer[T]) When(key string, cond func(T) bool) <-chan time.Time {
	return o.register(&waiter[T]{key: key, one: cond})
}

// WhenAll fires once all observed objects together (keyed "namespace/name") satisfy cond.
func (o *Observer[T]) WhenAll(cond func(map[string]T) bool) <-chan time.Time {
	return o.register(&waiter[T]{all: cond})
}

// WhenAny fires once any one observed object satisfies cond: for a state that lives in one
// of many objects whose names are not known in advance (a Service's generated EndpointSlices).
func (o *Observer[T]) WhenAny(cond func(T) bool) <-chan time.Time {
	return o.register(&waiter[T]{some: cond})
}
