// Package worker runs a controller's work queue: N workers pull keys, call the sync function,
// retry failures with rate-limited backoff up to a cap, and record reconcile metrics. Every
// kcm-split controller uses it, so retry and drop behaviour is the same everywhere.
package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/kcm-split/kcm-split/shared/metrics"
)

// DefaultMaxRetries is upstream's cap for most controllers: with the default controller rate
// limiter (5ms doubling) the 15th retry waits about 82s, after which the key is dropped until
// the next event or resync brings it back.
const DefaultMaxRetries = 15

// Results of one reconcile, the values of the result label.
const (
	ResultSuccess = "success"
	ResultError   = "error"
	ResultRequeue = "requeue"
	ResultDropped = "dropped"
)

// Requeue is returned by a sync function that finished without error but wants the key back
// after a delay (a namespace waiting for graceful termination, a PV waiting for a provisioner).
// It does not count as a failure and does not grow the backoff.
type Requeue struct{ After time.Duration }

func (r *Requeue) Error() string { return fmt.Sprintf("requeue after %s", r.After) }

// RequeueAfter returns a *Requeue for d.
func RequeueAfter(d time.Duration) error { return &Requeue{After: d} }

// SyncFunc reconciles one key.
type SyncFunc[K comparable] func(ctx context.Context, key K) error

// Options configure a Queue.
type Options[K comparable] struct {
	// Name is the workqueue name, the "name" label of workqueue_* metrics (upstream's names).
	Name string
	// Controller is upstream's name of the controller (the value --controllers takes, its
	// package's Name), the "controller" label of the reconcile metrics.
	Controller string
	// MaxRetries caps consecutive failures of one key; 0 means DefaultMaxRetries, < 0 never drops.
	MaxRetries int
	// RateLimiter defaults to workqueue.DefaultTypedControllerRateLimiter.
	RateLimiter workqueue.TypedRateLimiter[K]
	// Registerer receives workqueue and reconcile metrics; nil means no metrics.
	Registerer prometheus.Registerer
}

// Queue is a rate-limited work queue with its worker loop.
type Queue[K comparable] struct {
	workqueue.TypedRateLimitingInterface[K]
	opts     Options[K]
	total    *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// Reconcile metrics shared by every controller; a per-controller label keeps them apart.
func reconcileMetrics(reg prometheus.Registerer) (*prometheus.CounterVec, *prometheus.HistogramVec) {
	total := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kcm_split_reconcile_total",
		Help: "Reconciles by controller and result (success, error, requeue, dropped).",
	}, []string{"controller", "result"})
	duration := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "kcm_split_reconcile_duration_seconds",
		Help:    "Time one reconcile took, by controller.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
	}, []string{"controller"})
	if reg == nil {
		return total, duration
	}
	return metrics.Register(reg, total), metrics.Register(reg, duration)
}

// New returns a queue; it starts nothing until Run.
func New[K comparable](opts Options[K]) *Queue[K] {
	if opts.MaxRetries == 0 {
		opts.MaxRetries = DefaultMaxRetries
	}
	if opts.RateLimiter == nil {
		opts.RateLimiter = workqueue.DefaultTypedControllerRateLimiter[K]()
	}
	cfg := workqueue.TypedRateLimitingQueueConfig[K]{Name: opts.Name}
	if opts.Registerer != nil {
		cfg.MetricsProvider = metrics.WorkqueueProvider(opts.Registerer)
	}
	total, duration := reconcileMetrics(opts.Registerer)
	q := &Queue[K]{
		TypedRateLimitingInterface: workqueue.NewTypedRateLimitingQueueWithConfig(opts.RateLimiter, cfg),
		opts:                       opts,
		total:                      total,
		duration:                   duration,
	}
	// Pre-create the series so dashboards show zeros rather than gaps.
	for _, r := range []string{ResultSuccess, ResultError, ResultRequeue, ResultDropped} {
		total.WithLabelValues(opts.Controller, r)
	}
	return q
}

// Run starts workers goroutines calling fn and blocks until ctx is done; then it shuts the
// queue down and waits for in-flight syncs to return.
func (q *Queue[K]) Run(ctx context.Context, workers int, fn SyncFunc[K]) {
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			wait.UntilWithContext(ctx, func(ctx context.Context) {
				for q.ProcessNext(ctx, fn) {
				}
			}, time.Second)
		})
	}
	<-ctx.Done()
	q.ShutDown()
	wg.Wait()
}

// ProcessNext handles one key; it returns false once the queue is shut down. Exposed so unit
// tests can drive a queue step by step.
func (q *Queue[K]) ProcessNext(ctx context.Context, fn SyncFunc[K]) bool {
	key, quit := q.Get()
	if quit {
		return false
	}
	defer q.Done(key)
	if ctx.Err() != nil {
		// Shutting down: keys still queued are left to the next leader, which syncs every
		// object at start anyway.
		return false
	}

	start := time.Now()
	// A sync that has started finishes even when ctx ends meanwhile: aborting it half-way
	// would only turn a graceful stop into failed writes, retries and failure events. The
	// leader package bounds the drain (--shutdown-grace-period), and a lost Lease exits the
	// process outright.
	err := q.call(context.WithoutCancel(ctx), fn, key)
	q.duration.WithLabelValues(q.opts.Controller).Observe(time.Since(start).Seconds())
	q.handle(ctx, key, err)
	return true
}

// call runs fn, turning a panic into an error so one bad object cannot kill the worker.
func (q *Queue[K]) call(ctx context.Context, fn SyncFunc[K], key K) (err error) {
	defer func() {
		if r := recover(); r != nil {
			utilruntime.HandleErrorWithContext(ctx, nil, "Observed a panic in sync", "queue", q.opts.Name, "key", key, "panic", r)
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return fn(ctx, key)
}

func (q *Queue[K]) handle(ctx context.Context, key K, err error) {
	logger := klog.FromContext(ctx)
	var rq *Requeue
	switch {
	case err == nil:
		q.Forget(key)
		q.total.WithLabelValues(q.opts.Controller, ResultSuccess).Inc()
	case errors.As(err, &rq):
		q.Forget(key)
		q.AddAfter(key, rq.After)
		q.total.WithLabelValues(q.opts.Controller, ResultRequeue).Inc()
	case q.opts.MaxRetries < 0 || q.NumRequeues(key) < q.opts.MaxRetries:
		logger.V(2).Info("Sync failed, will retry", "queue", q.opts.Name, "key", key, "retries", q.NumRequeues(key), "err", err)
		q.AddRateLimited(key)
		q.total.WithLabelValues(q.opts.Controller, ResultError).Inc()
	default:
		logger.Error(err, "Dropping key from the queue after too many retries", "queue", q.opts.Name, "key", key, "retries", q.NumRequeues(key))
		q.Forget(key)
		q.total.WithLabelValues(q.opts.Controller, ResultDropped).Inc()
	}
}
