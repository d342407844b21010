package sharding

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationinformers "k8s.io/client-go/informers/coordination/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kcm-split/kcm-split/shared/metrics"
)

// LayoutOptions say where a binary's shard Leases are and which layout this process is of.
type LayoutOptions struct {
	// Binary is the binary's ID, the value of LabelBinary on its shard Leases.
	Binary string
	// Namespace holds the Leases; BaseLease is the binary's unsharded Lease name (the one
	// layout whose Lease may carry no labels: an unsharded process run without --shards).
	Namespace string
	BaseLease string
	// Shard is this process's shard; its Lease is Shard.LeaseName(BaseLease).
	Shard Shard
	// LeaseDuration is how long a Lease that does not say its own duration counts as held
	// after its last observed change.
	LeaseDuration time.Duration
	// Recheck bounds how long Wait sleeps between looks (expiry is a matter of time passing,
	// not of events).
	Recheck time.Duration
	// ClockSkew is how far this process's clock may be ahead of a Lease holder's. A Lease of
	// the first list blocks until its renewTime plus its duration plus ClockSkew at most, by
	// this clock (see Layout); 0 never trusts a renewTime: every Lease then counts as held for
	// its duration after first sight.
	ClockSkew time.Duration
}

// Layout keeps two layouts of one binary from writing at the same time: a shard of a layout
// (N shards of a hash) writes nothing while a Lease of this binary with another shard count or
// hash is held and fresh, so going from N to M shards, or from one hash to the other, never
// has two owners of a namespace. Freshness is by this
// process's own clock: a Lease counts as held for its lease duration after the last change
// this process saw of it (first sight included), as a standby judges expiry, so clock skew
// between hosts cannot shorten it and a Lease not seen since start is assumed held.
//
// One exception, for the Leases an uninstall or a killed layout leaves behind (expired, still
// naming their holder): a version in the first list of the Leases counts from renewTime +
// ClockSkew when that is earlier than first sight, so it blocks until renewTime + duration +
// ClockSkew at most, and not at all once that is past. Its holder's own fence (leader.Elector.AllowWrite)
// stopped its writes a renew deadline (shorter than the duration) after the renewal it
// stamped with renewTime, so with clocks apart by less than ClockSkew it writes nothing any
// more; a later version (the holder alive after all, a standby acquiring) is a change seen
// here and counts from its sight as always.
type Layout struct {
	opts     LayoutOptions
	informer cache.SharedIndexInformer
	changed  chan struct{}
	log      klog.Logger // Start's context's

	mu   sync.Mutex
	seen map[string]observed // by Lease name, other layouts only
}

type observed struct {
	rv       string
	since    time.Time // local time this version was first seen
	holder   string
	duration time.Duration
	layout   string
}

// NewLayout watches the Leases of opts.Namespace (reads only) for other layouts of
// opts.Binary; kcm_split_shard_layout_blocking_leases goes to reg (nil: none). Start it.
func NewLayout(client kubernetes.Interface, opts LayoutOptions, reg prometheus.Registerer) *Layout {
	l := &Layout{
		opts:     opts,
		informer: coordinationinformers.NewLeaseInformer(client, opts.Namespace, 0, cache.Indexers{}),
		changed:  make(chan struct{}, 1),
		seen:     map[string]observed{},
	}
	_, _ = l.informer.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc:    func(obj any, initial bool) { l.observe(obj, initial) },
		UpdateFunc: func(_, cur any) { l.observe(cur, false) },
		DeleteFunc: l.forget,
	})
	gauge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "kcm_split_shard_layout_blocking_leases",
		Help:        "Leases of another shard layout (--shards, --shard-hash) of this binary held and fresh as this process sees them; while above 0 this process starts no controller and its writes are refused (kcm_split_leader_fenced_writes_total{reason=\"other_shard_layout\"}). -1 before the Leases were first listed.",
		ConstLabels: prometheus.Labels{"binary": opts.Binary, "shard": strconv.Itoa(opts.Shard.Index), "shards": strconv.Itoa(opts.Shard.Count)},
	}, func() float64 {
		b, synced := l.Blockers(time.Now())
		if !synced {
			return -1
		}
		return float64(len(b))
	})
	if reg != nil {
		metrics.Register(reg, gauge)
	}
	return l
}

// Start runs the Lease informer until ctx ends.
func (l *Layout) Start(ctx context.Context) {
	l.log = klog.FromContext(ctx)
	go l.informer.RunWithContext(ctx)
}

// otherLayout returns the layout (Shard.Layout: "N shards", or "N shards, hash H") of a Lease
// of another layout of this binary, "" for this layout's Leases and every other Lease. A Lease
// without the hash label is of HashFNV: so were all before the choice of hash.
func (l *Layout) otherLayout(lease *coordinationv1.Lease) string {
	own := l.opts.Shard.Layout()
	if lease.Labels[LabelBinary] == l.opts.Binary {
		if other := layoutName(lease.Labels[LabelShards], Hash(lease.Labels[LabelHash])); other != own {
			return other
		}
		return ""
	}
	// The unsharded Lease written by a process without --shards carries no label.
	if lease.Name == l.opts.BaseLease && l.opts.Shard.Count != 1 {
		return layoutName("1", "")
	}
	return ""
}

// observe records a Lease of another layout as seen now; initial says it came with the first
// list, where an expired version counts from its renewTime (see Layout).
func (l *Layout) observe(obj any, initial bool) {
	lease, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return
	}
	layout := l.otherLayout(lease)
	if layout == "" {
		return
	}
	now := time.Now()
	o := observed{rv: lease.ResourceVersion, since: now, duration: l.opts.LeaseDuration, layout: layout}
	if h := lease.Spec.HolderIdentity; h != nil {
		o.holder = *h
	}
	if d := lease.Spec.LeaseDurationSeconds; d != nil && *d > 0 {
		o.duration = time.Duration(*d) * time.Second
	}
	if r := lease.Spec.RenewTime; initial && o.holder != "" && r != nil && l.opts.ClockSkew > 0 {
		if from := r.Add(l.opts.ClockSkew); from.Before(now) {
			o.since = from
			if !now.Before(from.Add(o.duration)) {
				l.log.Info("A Lease of another shard layout names a holder but expired before this process started; not waiting for it",
					"lease", lease.Name, "layout", layout, "holder", o.holder, "renewTime", r.UTC().Format(time.RFC3339),
					"expiredFor", now.Sub(r.Add(o.duration)).Round(time.Second).String(), "clockSkew", l.opts.ClockSkew.String())
			}
		}
	}
	l.mu.Lock()
	if prev, ok := l.seen[lease.Name]; ok && prev.rv == o.rv {
		o.since = prev.since
	}
	l.seen[lease.Name] = o
	l.mu.Unlock()
	l.wakeWait()
}

func (l *Layout) forget(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if lease, ok := obj.(*coordinationv1.Lease); ok {
		l.mu.Lock()
		delete(l.seen, lease.Name)
		l.mu.Unlock()
		l.wakeWait()
	}
}

// wakeWait tells a running Wait to look again now, without blocking; wake-ups coalesce.
func (l *Layout) wakeWait() {
	select {
	case l.changed <- struct{}{}:
	default:
	}
}

// Blockers returns the other-layout Leases held and fresh at now ("name (N shards, holder)"),
// and whether the Leases were listed at all; unlisted means unknown, which blocks.
func (l *Layout) Blockers(now time.Time) ([]string, bool) {
	if !l.informer.HasSynced() {
		return nil, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for name, o := range l.seen {
		if o.holder != "" && now.Sub(o.since) < o.duration {
			out = append(out, fmt.Sprintf("%s (%s, held by %s)", name, o.layout, o.holder))
		}
	}
	slices.Sort(out)
	return out, true
}

// AllowWrite is the fence's condition (leader.FenceAlso): the Leases were listed and none of
// another layout is held and fresh.
func (l *Layout) AllowWrite() bool {
	b, synced := l.Blockers(time.Now())
	return synced && len(b) == 0
}

// Wait blocks until AllowWrite holds (nil) or ctx ends, logging what it waits for whenever
// that changes.
func (l *Layout) Wait(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	last := "-"
	for {
		b, synced := l.Blockers(time.Now())
		if synced && len(b) == 0 {
			if last != "-" {
				logger.Info("No Lease of another shard layout is held any more; starting", "shard", l.opts.Shard.String())
			}
			return nil
		}
		why := fmt.Sprint(b)
		if !synced {
			why = "Leases not listed yet"
		}
		if why != last {
			logger.Info("Waiting for the Leases of another shard layout to be released or to expire", "shard", l.opts.Shard.String(), "blocking", why)
			last = why
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-l.changed:
		case <-time.After(l.opts.Recheck):
		}
	}
}
