package sharding

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kcm-split/kcm-split/shared/metrics"
)

// Who filtered the last list of a sharded informer: the values of the mode label.
const (
	ModeServer  = "server"  // the list carried ListMeta.ShardInfo: the apiserver filtered
	ModeClient  = "client"  // it did not: the apiserver ignored the selector, this process filters
	ModeUnknown = "unknown" // no list has come back yet
)

// View is what a shard's namespaced informers see: they ask the apiserver for the shard's
// range and check every object themselves, so that nothing of another shard's range enters
// a cache or a handler, whatever the apiserver does with the selector.
type View struct {
	shard    Shard
	selector string
	info     *prometheus.GaugeVec
	binary   string
	logger   klog.Logger

	mu    sync.Mutex
	modes map[string]string // by resource
}

// NewView returns the view of shard for binary, registering kcm_split_shard_info on reg
// (nil: none).
func NewView(shard Shard, binary string, reg prometheus.Registerer, logger klog.Logger) *View {
	info := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kcm_split_shard_info",
		Help: "1 for each resource this process's shard (shard of shards) caches, by who applies its namespace range: server (lists carry ListMeta.ShardInfo, the apiserver's ShardedListAndWatch gate is on), client (the apiserver ignored the selector; this process filters, the wire still carries every object), unknown (no list yet).",
	}, []string{"binary", "shard", "shards", "resource", "mode"})
	if reg != nil {
		info = metrics.Register(reg, info)
	}
	return &View{shard: shard, selector: shard.Selector().String(), info: info, binary: binary, logger: logger, modes: map[string]string{}}
}

// Shard is the shard this view is of.
func (v *View) Shard() Shard { return v.shard }

// Mode is who filtered the last lists of every resource together: ModeServer when the
// apiserver filtered each, ModeClient when it ignored the selector for any, ModeUnknown before
// any list.
func (v *View) Mode() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	mode := ModeUnknown
	for _, m := range v.modes {
		switch {
		case m == ModeClient:
			return ModeClient
		case m == ModeServer:
			mode = ModeServer
		}
	}
	return mode
}

// ResourceMode is who filtered the last list of resource.
func (v *View) ResourceMode(resource string) string {
	v.mu.Lock()
	defer v.mu.Unlock()
	if m, ok := v.modes[resource]; ok {
		return m
	}
	return ModeUnknown
}

func (v *View) setMode(resource, mode string) {
	v.mu.Lock()
	old, seen := v.modes[resource]
	v.modes[resource] = mode
	v.mu.Unlock()
	if seen && old == mode {
		return
	}
	labels := []string{v.binary, fmt.Sprint(v.shard.Index), fmt.Sprint(v.shard.Count), resource}
	if seen {
		v.info.DeleteLabelValues(append(labels, old)...)
	}
	v.info.WithLabelValues(append(labels, mode)...).Set(1)
	switch mode {
	case ModeClient:
		// Once per change of mode, not per list: a relist every few minutes would flood.
		v.logger.Info("The apiserver ignored the shard selector (no ListMeta.ShardInfo: gate ShardedListAndWatch off, an older server, or a resource it does not shard); filtering on the client side",
			"shard", v.shard.String(), "resource", resource, "selector", v.selector)
	case ModeServer:
		v.logger.V(2).Info("The apiserver filters lists and watches to this shard's namespaces", "shard", v.shard.String(), "resource", resource, "selector", v.selector)
	}
}

// ListFunc and WatchFunc are a typed client's List and Watch of one resource in every
// namespace, e.g. client.CoreV1().Pods("").List.
type (
	ListFunc  func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error)
	WatchFunc func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
)

// ListWatch wraps list and watch of a namespaced resource (named by resource, e.g. "pods" or
// "configmaps", in kcm_split_shard_info): both are sent with the shard's
// selector, and what comes back is filtered to the shard's range. tweak (nil: none) edits
// the options first, as a factory's TweakListOptions. The reflector is told not to use
// streaming lists (WatchListClient): only a list response says, with ShardInfo, whether the
// apiserver applied the selector.
func (v *View) ListWatch(resource string, list ListFunc, watchFn WatchFunc, tweak func(*metav1.ListOptions)) cache.ListerWatcher {
	v.setMode(resource, ModeUnknown)
	return &listWatch{v: v, resource: resource, list: list, watch: watchFn, tweak: tweak}
}

// Informer is a shared index informer over ListWatch(resource, list, watchFn, tweak) with indexers
// (nil: by namespace, as the informer factory's); register it with the factory's InformerFor
// before anything asks the factory for that type.
func (v *View) Informer(resource string, obj runtime.Object, list ListFunc, watchFn WatchFunc, tweak func(*metav1.ListOptions), resync time.Duration, indexers cache.Indexers) cache.SharedIndexInformer {
	if indexers == nil {
		indexers = cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
	}
	return cache.NewSharedIndexInformer(v.ListWatch(resource, list, watchFn, tweak), obj, resync, indexers)
}

type listWatch struct {
	v        *View
	resource string
	list     ListFunc
	watch    WatchFunc
	tweak    func(*metav1.ListOptions)
}

func (l *listWatch) options(opts metav1.ListOptions) metav1.ListOptions {
	if l.tweak != nil {
		l.tweak(&opts)
	}
	opts.ShardSelector = l.v.selector
	return opts
}

// IsWatchListSemanticsUnSupported makes the reflector list then watch (see ListWatch).
func (l *listWatch) IsWatchListSemanticsUnSupported() bool { return true }

func (l *listWatch) List(opts metav1.ListOptions) (runtime.Object, error) {
	return l.ListWithContext(context.Background(), opts)
}

func (l *listWatch) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return l.WatchWithContext(context.Background(), opts)
}

// ListWithContext lists with the selector and drops every item outside the range; a list
// the apiserver filtered (ShardInfo) is checked all the same, it costs a hash per item.
func (l *listWatch) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	obj, err := l.list(ctx, l.options(opts))
	if err != nil {
		return nil, err
	}
	mode := ModeClient
	if lm, err := meta.ListAccessor(obj); err == nil {
		if sl, ok := lm.(metav1.ShardedListInterface); ok && sl.GetShardInfo() != nil {
			mode = ModeServer
		}
	}
	items, err := meta.ExtractList(obj)
	if err != nil {
		return nil, fmt.Errorf("shard %s: reading the list: %w", l.v.shard, err)
	}
	kept := items[:0]
	for _, it := range items {
		if l.v.owns(it) {
			kept = append(kept, it)
		}
	}
	if err := meta.SetList(obj, kept); err != nil {
		return nil, fmt.Errorf("shard %s: filtering the list: %w", l.v.shard, err)
	}
	l.v.setMode(l.resource, mode)
	return obj, nil
}

// WatchWithContext watches with the selector and drops every event of an object outside
// the range (bookmarks and errors pass).
func (l *listWatch) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	w, err := l.watch(ctx, l.options(opts))
	if err != nil {
		return nil, err
	}
	return watch.Filter(w, func(ev watch.Event) (watch.Event, bool) {
		switch ev.Type {
		case watch.Added, watch.Modified, watch.Deleted:
			return ev, l.v.owns(ev.Object)
		}
		return ev, true
	}), nil
}

// owns checks one object: its namespace is in the range. An object without metadata is let
// through for the informer to refuse, as it would unsharded.
func (v *View) owns(obj runtime.Object) bool {
	m, err := meta.Accessor(obj)
	if err != nil {
		return true
	}
	return v.shard.Owns(m.GetNamespace())
}
