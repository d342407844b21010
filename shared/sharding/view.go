package sharding

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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
	ModeUnknown = "unknown" // no list (or probe) has come back yet
)

// View is what a shard's namespaced informers see: they ask the apiserver for the shard's
// range and check every object themselves, so that nothing of another shard's range enters
// a cache or a handler, whatever the apiserver does with the selector.
type View struct {
	shard    Shard
	selector string // "" for a hash the apiserver cannot compute: nothing is asked of it
	info     *prometheus.GaugeVec
	binary   string
	logger   klog.Logger

	mu     sync.Mutex
	modes  map[string]string       // by resource
	counts map[string]*objectCount // by resource, of the informers built by Informer
}

// NewView returns the view of shard for binary, registering kcm_split_shard_info,
// kcm_split_shard_objects and kcm_split_shard_largest_namespace_objects on reg (nil: none).
func NewView(shard Shard, binary string, reg prometheus.Registerer, logger klog.Logger) *View {
	info := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kcm_split_shard_info",
		Help: "1 for each resource this process's shard (shard of shards) caches, by who applies its namespace range: server (lists carry ListMeta.ShardInfo, the apiserver's ShardedListAndWatch gate is on), client (the apiserver ignored the selector; this process filters, the wire still carries every object), unknown (no list yet).",
	}, []string{"binary", "shard", "shards", "resource", "mode"})
	if reg != nil {
		info = metrics.Register(reg, info)
	}
	v := &View{shard: shard, info: info, binary: binary, logger: logger, modes: map[string]string{}, counts: map[string]*objectCount{}}
	if reg != nil {
		metrics.Register(reg, newObjectsCollector(v))
	}
	if shard.Hash.ServerSide() {
		v.selector = shard.Selector().String()
	}
	return v
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
	switch {
	case mode == ModeClient && v.selector == "":
		v.logger.Info("The apiserver cannot compute this shard's hash; filtering on the client side (every list and watch carries all namespaces)",
			"shard", v.shard.String(), "hash", v.shard.Hash.Name(), "resource", resource)
	case mode == ModeClient:
		// Once per change of mode, not per list: a relist every few minutes would flood.
		v.logger.Info("The apiserver ignored the shard selector (no ListMeta.ShardInfo: gate ShardedListAndWatch off, an older server, or a resource it does not shard); filtering on the client side",
			"shard", v.shard.String(), "resource", resource, "selector", v.selector)
	case mode == ModeServer:
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
// "configmaps", in kcm_split_shard_info): both are sent with the shard's selector, and what
// comes back is filtered to the shard's range. tweak (nil: none) edits the options first, as a
// factory's TweakListOptions.
//
// The reflector fills the cache with a streaming list (WatchListClient, as an unsharded
// informer does): objects arrive one by one, each transformed or dropped before the next, so
// a shard never holds its whole range untrimmed at once. A streaming list does not say whether
// the apiserver applied the selector (its end bookmark carries no ShardInfo), so each one is
// preceded by a probe: a list of at most one object with the same selector, read for
// ListMeta.ShardInfo. If the reflector falls back to a plain list (an apiserver without
// streaming lists), that list says it itself.
//
// With a hash the apiserver cannot compute (Hash.ServerSide false) no selector is sent and
// nothing is probed: the mode is client from the start.
func (v *View) ListWatch(resource string, list ListFunc, watchFn WatchFunc, tweak func(*metav1.ListOptions), opts ...Option) cache.ListerWatcher {
	if v.selector == "" {
		v.setMode(resource, ModeClient)
	} else {
		v.setMode(resource, ModeUnknown)
	}
	l := &listWatch{v: v, resource: resource, list: list, watch: watchFn, tweak: tweak}
	for _, o := range opts {
		o(l)
	}
	return l
}

// Option changes one of a view's informers.
type Option func(*listWatch)

// WithProbe has the view read whether the apiserver applies the selector from probe's lists
// rather than from the informer's own: for metadata-only informers, whose lists
// (PartialObjectMetadataList) lose ListMeta.ShardInfo in the apiserver's conversion on
// v1.36.3 although the apiserver filtered them. probe gets the same options as the informer's
// list (selector, tweak, limit); see RawProbe.
func WithProbe(probe ListFunc) Option { return func(l *listWatch) { l.probe = probe } }

// Informer is a shared index informer over ListWatch(resource, list, watchFn, tweak) with indexers
// (nil: by namespace, as the informer factory's); register it with the factory's InformerFor
// before anything asks the factory for that type. Its cache is counted by namespace
// (kcm_split_shard_objects), replacing the count of the resource's previous informer.
func (v *View) Informer(resource string, obj runtime.Object, list ListFunc, watchFn WatchFunc, tweak func(*metav1.ListOptions), resync time.Duration, indexers cache.Indexers, opts ...Option) cache.SharedIndexInformer {
	if indexers == nil {
		indexers = cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
	}
	inf := cache.NewSharedIndexInformer(v.ListWatch(resource, list, watchFn, tweak, opts...), obj, resync, indexers)
	v.countObjects(resource, inf)
	return inf
}

type listWatch struct {
	v        *View
	resource string
	list     ListFunc
	watch    WatchFunc
	tweak    func(*metav1.ListOptions)
	probe    ListFunc // nil: list
}

func (l *listWatch) options(opts metav1.ListOptions) metav1.ListOptions {
	if l.tweak != nil {
		l.tweak(&opts)
	}
	opts.ShardSelector = l.v.selector // "" (none) for a hash only this process computes
	return opts
}

func (l *listWatch) List(opts metav1.ListOptions) (runtime.Object, error) {
	return l.ListWithContext(context.Background(), opts)
}

func (l *listWatch) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return l.WatchWithContext(context.Background(), opts)
}

// ListWithContext lists with the selector and drops every item outside the range; a list
// the apiserver filtered (ShardInfo) is checked all the same, it costs a hash per item. The
// reflector lists only when a streaming list is not to be had.
func (l *listWatch) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	obj, err := l.list(ctx, l.options(opts))
	if err != nil {
		return nil, err
	}
	mode := modeOf(obj)
	switch {
	case l.v.selector == "":
		mode = ModeClient
	case l.probe != nil:
		// This list cannot say (metadata only): ask the probe, keep what was known if it fails.
		mode = l.probeMode(ctx)
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
	if mode != "" {
		l.v.setMode(l.resource, mode)
	}
	return obj, nil
}

// WatchWithContext watches with the selector and drops every event of an object outside
// the range (bookmarks and errors pass). A watch that starts with the initial events (a
// streaming list) is preceded by a probe for the mode.
func (l *listWatch) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	if l.v.selector != "" && opts.SendInitialEvents != nil && *opts.SendInitialEvents {
		if mode := l.probeMode(ctx); mode != "" {
			l.v.setMode(l.resource, mode)
		}
	}
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

// probeMode lists at most one object of the range, at the latest resource version (a
// resource version of "0" would make the watch cache ignore the limit and send the whole
// range), and says who applied the selector; "" when the probe failed: the mode stays what
// it was (unknown is not client), and the watch goes on, its events filtered here as always.
func (l *listWatch) probeMode(ctx context.Context) string {
	probe := l.probe
	if probe == nil {
		probe = l.list
	}
	obj, err := probe(ctx, l.options(metav1.ListOptions{Limit: 1}))
	if err != nil {
		l.v.logger.V(2).Info("Cannot probe whether the apiserver applies the shard selector; the mode stays as it was", "shard", l.v.shard.String(), "resource", l.resource, "err", err)
		return ""
	}
	return modeOf(obj)
}

// modeOf says who filtered a list: ModeServer when it carries ListMeta.ShardInfo (typed or
// unstructured), ModeClient otherwise.
func modeOf(obj runtime.Object) string {
	if u, ok := obj.(*unstructured.UnstructuredList); ok {
		if _, found, _ := unstructured.NestedFieldNoCopy(u.Object, "metadata", "shardInfo"); found {
			return ModeServer
		}
		return ModeClient
	}
	if lm, err := meta.ListAccessor(obj); err == nil {
		if sl, ok := lm.(metav1.ShardedListInterface); ok && sl.GetShardInfo() != nil {
			return ModeServer
		}
	}
	return ModeClient
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
