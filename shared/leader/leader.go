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

// ErrLeaseLost is returned by Run when this process stopped being leader while it was
// supposed to keep running. The process must exit: its caches and queues may already act on
// state the new leader is changing.
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
	ShutdownGrace time.Duration
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

// Elector runs a function while holding the Lease.
type Elector struct {
	cfg      Config
	client   kubernetes.Interface
	watchdog *leaderelection.HealthzAdaptor
	status   prometheus.Gauge

	mu      sync.Mutex
	leading bool
}

// New returns an Elector. Each Lease request is bounded by half the renew deadline, so client
// should have no client-wide timeout (it also carries a long-running watch of the Lease).
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
	if reg != nil {
		gauge = metrics.Register(reg, gauge)
	}
	e := &Elector{
		cfg:      cfg,
		client:   client,
		watchdog: leaderelection.NewLeaderHealthzAdaptor(cmp.Or(cfg.WatchdogTimeout, defaultWatchdogTimeout)),
		status:   gauge.WithLabelValues(cfg.Name),
	}
	e.status.Set(0)
	return e, nil
}

// Identity is the holder identity this process writes into the Lease.
func (e *Elector) Identity() string { return e.cfg.Identity }

// IsLeader reports whether lead is running (always true once started without election).
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

func (e *Elector) setLeading(v bool) {
	e.mu.Lock()
	e.leading = v
	e.mu.Unlock()
	if v {
		e.status.Set(1)
	} else {
		e.status.Set(0)
	}
}

// Run blocks until ctx is done, lead returns, or leadership is lost. With election disabled
// it just runs lead. lead gets a context that ends when ctx ends or the Lease is lost.
//
// Shutdown order matters: on ctx cancel, lead is allowed to finish first (its workers drain)
// and only then is the Lease released, so a standby never overlaps with our last writes.
// The wait is bounded by Config.ShutdownGrace; the Lease is renewed while it lasts.
//
// It returns nil on a clean shutdown, lead's error if lead failed, and ErrLeaseLost when
// the Lease was lost while ctx was still live.
func (e *Elector) Run(ctx context.Context, lead func(context.Context) error) error {
	logger := klog.FromContext(ctx)
	if !e.cfg.Enabled {
		e.setLeading(true)
		defer e.setLeading(false)
		return lead(ctx)
	}
	lease := e.cfg.Namespace + "/" + e.cfg.Name

	// The election has its own context so that cancelling ctx does not release the Lease
	// before lead has drained.
	electCtx, cancelElect := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelElect()

	var (
		started      atomic.Bool // lead was started
		leadRunning  atomic.Bool // lead has not returned yet; the Lease must not be released
		ended        atomic.Bool // we ended the election because lead returned on its own
		graceExpired atomic.Bool // shutdown gave up waiting for lead
		leadDone     = make(chan error, 1)
	)
	callbacks := leaderelection.LeaderCallbacks{
		OnStartedLeading: func(leaseCtx context.Context) {
			// Mark the start before looking at ctx: the shutdown goroutine decides whether to
			// wait for lead by reading started after ctx ended, so either it sees started and
			// waits, or ctx had ended before this check and lead never starts.
			leadRunning.Store(true)
			started.Store(true)
			if ctx.Err() != nil { // shutting down already: do not start work
				leadRunning.Store(false)
				ended.Store(true)
				leadDone <- nil
				cancelElect()
				return
			}
			logger.Info("Started leading", "lease", lease, "identity", e.cfg.Identity)
			e.setLeading(true)
			runCtx, cancel := context.WithCancel(ctx)
			stop := context.AfterFunc(leaseCtx, cancel)
			err := lead(runCtx)
			stop()
			cancel()
			// Only a lead that returned while the Lease was still ours ends the election
			// deliberately; one that returned because leaseCtx ended was stopped by a loss.
			deliberate := leaseCtx.Err() == nil
			leadRunning.Store(false)
			leadDone <- err
			if deliberate {
				ended.Store(true)
				cancelElect()
			}
		},
		OnStoppedLeading: func() {
			e.setLeading(false)
		},
		OnNewLeader: func(identity string) {
			if identity != e.cfg.Identity {
				logger.Info("New leader elected", "lease", lease, "identity", identity)
			}
		},
	}
	released := e.watchReleases(electCtx)

	grace := e.cfg.ShutdownGrace
	if grace <= 0 {
		grace = e.cfg.LeaseDuration
	}
	go func() {
		select {
		case <-electCtx.Done():
			return
		case <-ctx.Done():
		}
		if started.Load() {
			select {
			case <-electCtx.Done(): // lead returned and ended the election
				return
			case <-time.After(grace):
				logger.Info("Controller did not stop within the shutdown grace period; exiting without releasing the Lease", "grace", grace)
				graceExpired.Store(true)
			}
		}
		cancelElect()
	}()

	logger.Info("Waiting for the Lease", "lease", lease, "identity", e.cfg.Identity)
	for {
		lock := &interruptibleLock{
			Interface: &resourcelock.LeaseLock{
				LeaseMeta:  metav1.ObjectMeta{Namespace: e.cfg.Namespace, Name: e.cfg.Name},
				Client:     e.client.CoordinationV1(),
				LockConfig: resourcelock.ResourceLockConfig{Identity: e.cfg.Identity},
			},
			// client-go releases the Lease whenever its election ends, also after a failed
			// renewal; while our controller still runs that would hand a standby the Lease
			// with two writers live. Only a controller that has returned may release.
			mayRelease: func() bool { return !leadRunning.Load() },
			timeout:    e.cfg.RenewDeadline / 2,
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
			return fmt.Errorf("leader election: %w", err)
		}
		// client-go ties the watchdog to an elector only in RunOrDie; do it for each attempt.
		e.watchdog.SetLeaderElection(le)
		attemptCtx, cancelAttempt := context.WithCancel(electCtx)
		go func() {
			select {
			case <-released:
				// The holder released the Lease (a graceful shutdown). client-go would notice
				// only at its next retry, up to 2.2 retry periods away; start over instead, which
				// tries at once.
				if lock.interrupt(cancelAttempt) {
					logger.V(2).Info("Lease released by its holder, trying to acquire it now", "lease", lease)
				}
			case <-attemptCtx.Done():
			}
		}()
		le.Run(attemptCtx)
		cancelAttempt()
		if started.Load() || electCtx.Err() != nil {
			break
		}
	}

	switch {
	case !started.Load():
		return nil // shut down while standing by
	case graceExpired.Load():
		return fmt.Errorf("controller did not stop within %s of shutdown; Lease %s left to expire", grace, lease)
	case !ended.Load():
		// The election ended by itself while the controller ran: renewal failed. Stop now,
		// whatever the controller is doing; a standby may already be leading.
		return ErrLeaseLost
	}
	err := <-leadDone
	if err == nil && ctx.Err() != nil {
		logger.Info("Released the Lease", "lease", lease)
	}
	return err
}
