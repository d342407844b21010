// Package leader runs one controller under its own Lease. Each kcm-split binary elects
// separately (upstream kube-controller-manager holds one Lease for all its controllers), so a
// restart, upgrade or crash of one controller never moves the others.
package leader

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	"github.com/kcm-split/kcm-split/shared/metrics"
)

// ErrLeaseLost is returned by Run when the Lease was lost and the controller did not stop
// within the shutdown grace period afterwards (or the loss came during a shutdown): the
// process must exit, since it cannot stand by again while a wedged controller still runs. A
// controller that stops after a loss is not an error: Run stands by again in-process.
var ErrLeaseLost = errors.New("leader election lost")

// defaultWatchdogTimeout is how long past a missed renewal /healthz keeps passing; upstream
// uses 20s.
const defaultWatchdogTimeout = 20 * time.Second

// Config is the leader election configuration, upstream's flags.
type Config struct {
	Enabled       bool
	Namespace     string
	Name          string
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
	// Identity defaults to "<hostname>_<uuid>", unique per process even on one host.
	Identity string
	// WatchdogTimeout is how long past the lease duration without a renewal the /healthz
	// watchdog keeps passing; 0 means 20s, upstream's value.
	WatchdogTimeout time.Duration
	// ShutdownGrace bounds how long Run waits for lead to drain after ctx ends before it
	// releases the Lease anyway; 0 means LeaseDuration. The Lease keeps being renewed meanwhile.
	// It also bounds the wait for lead to stop after the Lease was lost.
	ShutdownGrace time.Duration
	// Labels are set on the Lease when this process acquires it; nil (the default) writes
	// the Lease exactly as client-go always has. Sharded binaries name their layout here.
	Labels map[string]string
}

// Validate checks the timing rules client-go enforces, naming the flag at fault.
func (c Config) Validate() error {
	if !c.Enabled {
		return nil
	}
	switch {
	case c.LeaseDuration <= 0:
		return fmt.Errorf("invalid value for --leader-elect-lease-duration: %s must be positive", c.LeaseDuration)
	case c.RenewDeadline <= 0:
		return fmt.Errorf("invalid value for --leader-elect-renew-deadline: %s must be positive", c.RenewDeadline)
	case c.RetryPeriod <= 0:
		return fmt.Errorf("invalid value for --leader-elect-retry-period: %s must be positive", c.RetryPeriod)
	case c.RenewDeadline >= c.LeaseDuration:
		return fmt.Errorf("invalid value for --leader-elect-renew-deadline: %s must be less than --leader-elect-lease-duration (%s)", c.RenewDeadline, c.LeaseDuration)
	case float64(c.RenewDeadline) <= leaderelection.JitterFactor*float64(c.RetryPeriod):
		return fmt.Errorf("invalid value for --leader-elect-retry-period: %s must be less than --leader-elect-renew-deadline / %.1f", c.RetryPeriod, leaderelection.JitterFactor)
	case c.Name == "":
		return errors.New("invalid value for --leader-elect-resource-name: must not be empty")
	case c.Namespace == "":
		return errors.New("invalid value for --leader-elect-resource-namespace: must not be empty")
	}
	return nil
}

// DefaultIdentity returns "<hostname>_<uuid>".
func DefaultIdentity() (string, error) {
	host, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("reading hostname for the leader election identity: %w", err)
	}
	return host + "_" + string(uuid.NewUUID()), nil
}

// Elector runs a function while holding the Lease, for as many terms as it wins, and fences
// the controller's writes to the times it may really be leading (see AllowWrite).
type Elector struct {
	cfg      Config
	client   kubernetes.Interface
	watchdog *leaderelection.HealthzAdaptor
	status   prometheus.Gauge
	fenced   *prometheus.CounterVec
	terms    prometheus.Counter
	losses   prometheus.Counter

	mu      sync.Mutex
	leading bool
	// renewedAt is when the last successful acquisition or renewal by this process was sent
	// (local monotonic clock): the Lease cannot have been valid for us any earlier.
	renewedAt time.Time
	// usurper is another holder seen on the Lease while this process leads.
	usurper string
	// stepDown ends the current term; nil while standing by.
	stepDown context.CancelFunc
	// seen is the last change of the Lease the watch saw, and when it saw it.
	seen       leaseRecord
	seenAt     time.Time
	expiry     *time.Timer
	wake       chan struct{}
	stepReason string
	// confirmed: the watch has shown this process as holder since its term began.
	confirmed bool
	// extra are further conditions on writes (FenceAlso), none by default.
	extra []*extraFence
}

// leaseRecord is what identifies one renewal of the Lease: every renewal writes a new
// renewTime, so a record unchanged for a lease duration has not been renewed for that long.
type leaseRecord struct {
	holder      string
	renew       time.Time
	acquire     time.Time
	transitions int
	duration    time.Duration
}

func recordOf(r *resourcelock.LeaderElectionRecord) leaseRecord {
	return leaseRecord{holder: r.HolderIdentity, renew: r.RenewTime.Time, acquire: r.AcquireTime.Time,
		transitions: r.LeaderTransitions, duration: time.Duration(r.LeaseDurationSeconds) * time.Second}
}

// New returns an Elector. Each Lease request is bounded by half the renew deadline, so client
// should have no client-wide timeout (it also carries a long-running watch of the Lease).
// client must not be fenced: it renews the Lease.
func New(cfg Config, client kubernetes.Interface, reg prometheus.Registerer) (*Elector, error) {
	if cfg.Identity == "" {
		id, err := DefaultIdentity()
		if err != nil {
			return nil, err
		}
		cfg.Identity = id
	}
	gauge := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "leader_election_master_status",
		Help: "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease.",
	}, []string{"name"})
	fenced := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kcm_split_leader_fenced_writes_total",
		Help: "Mutating requests refused before they left the process because its Lease may have been taken, by reason (not_leading, renewal_stale, other_holder; migration_not_member: not a fresh member of the Leader Migration Lease's group).",
	}, []string{"name", "reason"})
	terms := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kcm_split_leader_terms_total",
		Help: "Times this process started leading.",
	}, []string{"name"})
	losses := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kcm_split_leader_losses_total",
		Help: "Times this process lost the Lease while it still meant to lead, and stood by again.",
	}, []string{"name"})
	if reg != nil {
		gauge = metrics.Register(reg, gauge)
		fenced = metrics.Register(reg, fenced)
		terms = metrics.Register(reg, terms)
		losses = metrics.Register(reg, losses)
	}
	for _, reason := range []string{reasonNotLeading, reasonStale, reasonOtherHolder} {
		fenced.WithLabelValues(cfg.Name, reason)
	}
	e := &Elector{
		cfg:      cfg,
		client:   client,
		watchdog: leaderelection.NewLeaderHealthzAdaptor(cmp.Or(cfg.WatchdogTimeout, defaultWatchdogTimeout)),
		status:   gauge.WithLabelValues(cfg.Name),
		fenced:   fenced.MustCurryWith(prometheus.Labels{"name": cfg.Name}),
		terms:    terms.WithLabelValues(cfg.Name),
		losses:   losses.WithLabelValues(cfg.Name),
		wake:     make(chan struct{}, 1),
	}
	e.status.Set(0)
	return e, nil
}

// Identity is the holder identity this process writes into the Lease.
func (e *Elector) Identity() string { return e.cfg.Identity }

// IsLeader reports whether lead is running in a live term (always true once started without
// election).
func (e *Elector) IsLeader() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.leading
}

// Check is the leader election watchdog for /healthz and /livez: it fails when this process
// believes it leads but has not renewed the Lease for longer than the lease duration plus
// a grace, which means the process is wedged and should be restarted.
func (e *Elector) Check(r *http.Request) error {
	if !e.cfg.Enabled {
		return nil
	}
	return e.watchdog.Check(r)
}

func (e *Elector) beginTerm(stop context.CancelFunc) {
	e.mu.Lock()
	e.leading = true
	e.usurper = ""
	e.stepReason = ""
	e.confirmed = false
	e.stepDown = stop
	e.mu.Unlock()
	e.status.Set(1)
	e.terms.Inc()
}

func (e *Elector) endTerm() {
	e.mu.Lock()
	e.leading = false
	e.stepDown = nil
	e.mu.Unlock()
	e.status.Set(0)
}

// renewed records a successful acquisition or renewal sent at sent.
func (e *Elector) renewed(sent time.Time) {
	e.mu.Lock()
	if sent.After(e.renewedAt) {
		e.renewedAt = sent
	}
	e.mu.Unlock()
}

// wakeUp makes a standby try to acquire at once (without blocking, coalescing).
func (e *Elector) wakeUp() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Run blocks until ctx is done, lead fails, or a wedged controller forces an exit. With
// election disabled it just runs lead. Otherwise it leads for as many terms as it wins: lead
// gets a context that ends when ctx ends or the term ends (renewal failed, another holder
// seen on the Lease, or a write refused by the fence). A controller that stops after losing
// the Lease is a fresh start waiting to happen: Run stands by again, in-process, and calls
// lead anew when it wins the Lease back, as a restart would, without one.
//
// Shutdown order matters: on ctx cancel, lead is allowed to finish first (its workers drain)
// and only then is the Lease released, so a standby never overlaps with our last writes.
// The wait is bounded by Config.ShutdownGrace; the Lease is renewed while it lasts.
//
// It returns nil on a clean shutdown, lead's error if lead failed while leading, an error if
// lead did not stop within the grace after shutdown, and ErrLeaseLost when the Lease was lost
// and lead did not stop within the grace (or the loss came during a shutdown).
func (e *Elector) Run(ctx context.Context, lead func(context.Context) error) error {
	if !e.cfg.Enabled {
		e.beginTerm(nil)
		defer e.endTerm()
		return lead(ctx)
	}
	logger := klog.FromContext(ctx)
	lease := e.cfg.Namespace + "/" + e.cfg.Name

	// The election has its own context so that cancelling ctx does not release the Lease
	// before lead has drained.
	electCtx, cancelElect := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelElect()
	e.watchLease(electCtx)

	logger.Info("Waiting for the Lease", "lease", lease, "identity", e.cfg.Identity)
	for {
		done, err := e.term(ctx, electCtx, lead)
		if done {
			return err
		}
		e.losses.Inc()
		logger.Info("Standing by again after losing the Lease; the controller stopped and its caches are dropped", "lease", lease, "identity", e.cfg.Identity)
	}
}

// term runs acquisition attempts until this process has led once, and returns when that
// lead is over: done is false when the Lease was lost and lead stopped (stand by again).
func (e *Elector) term(ctx, electCtx context.Context, lead func(context.Context) error) (done bool, err error) {
	logger := klog.FromContext(ctx)
	lease := e.cfg.Namespace + "/" + e.cfg.Name
	grace := e.cfg.ShutdownGrace
	if grace <= 0 {
		grace = e.cfg.LeaseDuration
	}
	var (
		started      atomic.Bool // lead was started in this term
		leadRunning  atomic.Bool // lead has not returned yet; the Lease must not be released
		deliberate   atomic.Bool // the election ended because lead returned while the Lease was ours
		graceExpired atomic.Bool // shutdown gave up waiting for lead
		leadDone     = make(chan error, 1)
		lock         *interruptibleLock // of the last attempt: it knows whether the release landed
	)
	for {
		attemptCtx, cancelAttempt := context.WithCancel(electCtx)
		callbacks := leaderelection.LeaderCallbacks{
			OnStartedLeading: func(leaseCtx context.Context) {
				// Mark the start before looking at ctx: the shutdown goroutine decides whether
				// to wait for lead by reading started after ctx ended, so either it sees started
				// and waits, or ctx had ended before this check and lead never starts.
				leadRunning.Store(true)
				started.Store(true)
				if ctx.Err() != nil { // shutting down already: do not start work
					leadRunning.Store(false)
					deliberate.Store(true)
					leadDone <- nil
					cancelAttempt()
					return
				}
				logger.Info("Started leading", "lease", lease, "identity", e.cfg.Identity)
				e.beginTerm(cancelAttempt)
				runCtx, cancel := context.WithCancel(ctx)
				// The term is over for IsLeader and the fence before the controller hears of it.
				stop := context.AfterFunc(leaseCtx, func() { e.endTerm(); cancel() })
				stopWatch := e.watchRenewals(leaseCtx)
				err := lead(runCtx)
				stopWatch()
				stop()
				cancel()
				// Only a lead that returned while the Lease was still ours ends the election
				// deliberately; one that returned because leaseCtx ended was stopped by a loss.
				if leaseCtx.Err() == nil {
					deliberate.Store(true)
				}
				leadRunning.Store(false)
				leadDone <- err
				if deliberate.Load() {
					cancelAttempt()
				}
			},
			OnStoppedLeading: e.endTerm,
			OnNewLeader: func(identity string) {
				if identity != e.cfg.Identity {
					logger.Info("New leader elected", "lease", lease, "identity", identity)
				}
			},
		}
		lock = &interruptibleLock{
			Interface: &resourcelock.LeaseLock{
				LeaseMeta:  metav1.ObjectMeta{Namespace: e.cfg.Namespace, Name: e.cfg.Name},
				Client:     e.client.CoordinationV1(),
				LockConfig: resourcelock.ResourceLockConfig{Identity: e.cfg.Identity},
				Labels:     e.cfg.Labels,
			},
			// client-go releases the Lease whenever its election ends, also after a failed
			// renewal; while our controller still runs that would hand a standby the Lease
			// with two writers live. Only a controller that has returned may release.
			mayRelease: func() bool { return !leadRunning.Load() },
			timeout:    e.cfg.RenewDeadline / 2,
			elector:    e,
		}
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:            lock,
			LeaseDuration:   e.cfg.LeaseDuration,
			RenewDeadline:   e.cfg.RenewDeadline,
			RetryPeriod:     e.cfg.RetryPeriod,
			ReleaseOnCancel: true,
			Name:            e.cfg.Name,
			Callbacks:       callbacks,
		})
		if err != nil {
			cancelAttempt()
			return true, fmt.Errorf("leader election: %w", err)
		}
		// client-go ties the watchdog to an elector only in RunOrDie; do it for each attempt.
		e.watchdog.SetLeaderElection(le)
		go func() {
			select {
			case <-e.wake:
				// The Lease was released, or has expired by the watch's count: client-go would
				// notice only at its next retry, up to 2.2 retry periods away (and a fresh
				// elector would wait a whole lease duration again); start over instead.
				if lock.interrupt(cancelAttempt) {
					logger.V(2).Info("Lease released or expired, trying to acquire it now", "lease", lease)
				}
			case <-attemptCtx.Done():
			}
		}()
		go func() {
			select {
			case <-attemptCtx.Done():
				return
			case <-ctx.Done():
			}
			if started.Load() {
				select {
				case <-attemptCtx.Done(): // lead returned and ended the election, or the Lease was lost
					return
				case <-time.After(grace):
					logger.Info("Controller did not stop within the shutdown grace period; exiting without releasing the Lease", "grace", grace)
					graceExpired.Store(true)
				}
			}
			cancelAttempt()
		}()
		le.Run(attemptCtx)
		cancelAttempt()
		if started.Load() {
			break
		}
		if ctx.Err() != nil {
			return true, nil // shut down while standing by
		}
		// The attempt was interrupted to try again at once.
	}

	switch {
	case graceExpired.Load():
		return true, fmt.Errorf("controller did not stop within %s of shutdown; Lease %s left to expire", grace, lease)
	case deliberate.Load():
		err := <-leadDone
		if err == nil && ctx.Err() != nil {
			if released, relErr := lock.releaseOutcome(); released {
				logger.Info("Released the Lease", "lease", lease)
			} else {
				// Refused (RBAC gone with an uninstall, say) or never reached: the Lease is not
				// ours to write any more either way, and it expires by itself.
				logger.Info("Could not release the Lease; it expires after the lease duration", "lease", lease, "duration", e.cfg.LeaseDuration, "err", relErr)
			}
		}
		return true, err
	case ctx.Err() != nil:
		// Lost while shutting down: the controller may still be draining; nothing more is
		// written (the fence is closed), and the Lease is left to expire.
		return true, ErrLeaseLost
	}
	// The term ended by itself while the controller ran. Its context is cancelled; the fence
	// refuses its writes from now on. Wait for it to stop before standing by again, so that
	// a next term never overlaps with this one.
	e.mu.Lock()
	reason := cmp.Or(e.stepReason, "renewal failed")
	e.mu.Unlock()
	logger.Info("Lost the Lease; stopping the controller", "lease", lease, "reason", reason)
	select {
	case err := <-leadDone:
		if err != nil && !errors.Is(err, context.Canceled) {
			logger.V(2).Info("Controller returned after losing the Lease", "err", err)
		}
		if ctx.Err() != nil {
			return true, nil
		}
		return false, nil
	case <-time.After(grace):
		logger.Info("Controller did not stop within the grace period after losing the Lease; exiting", "grace", grace)
		return true, ErrLeaseLost
	}
}
