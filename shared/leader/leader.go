// Package leader runs one controller under its own Lease. Each kcm-split binary elects
// separately (upstream kube-controller-manager holds one Lease for all its controllers), so a
// restart, upgrade or crash of one controller never moves the others.
package leader

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
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

// watchdogTimeout is how long past a missed renewal /healthz keeps passing; upstream uses 20s.
const watchdogTimeout = 20 * time.Second

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

// New returns an Elector. client should have a request timeout below RenewDeadline so one
// hung request cannot eat the whole renewal window.
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
		watchdog: leaderelection.NewLeaderHealthzAdaptor(watchdogTimeout),
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

	// The election has its own context so that cancelling ctx does not release the Lease
	// before lead has drained.
	electCtx, cancelElect := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelElect()

	var (
		startMu  sync.Mutex
		started  bool
		leadDone = make(chan error, 1)
	)
	callbacks := leaderelection.LeaderCallbacks{
		OnStartedLeading: func(leaseCtx context.Context) {
			startMu.Lock()
			if ctx.Err() != nil { // shutting down already: do not start work
				startMu.Unlock()
				leadDone <- nil
				cancelElect()
				return
			}
			started = true
			startMu.Unlock()
			logger.Info("Started leading", "lease", e.cfg.Namespace+"/"+e.cfg.Name, "identity", e.cfg.Identity)
			e.setLeading(true)
			runCtx, cancel := context.WithCancel(ctx)
			stop := context.AfterFunc(leaseCtx, cancel)
			err := lead(runCtx)
			stop()
			cancel()
			leadDone <- err
			cancelElect()
		},
		OnStoppedLeading: func() {
			e.setLeading(false)
		},
		OnNewLeader: func(identity string) {
			if identity != e.cfg.Identity {
				logger.Info("New leader elected", "lease", e.cfg.Namespace+"/"+e.cfg.Name, "identity", identity)
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
		startMu.Lock()
		wasStarted := started
		startMu.Unlock()
		if wasStarted {
			select {
			case err := <-leadDone:
				leadDone <- err // keep it for Run's result
			case <-time.After(grace):
				logger.Info("Controller did not stop within the shutdown grace period; releasing the Lease anyway", "grace", grace)
			}
		}
		cancelElect()
	}()

	logger.Info("Waiting for the Lease", "lease", e.cfg.Namespace+"/"+e.cfg.Name, "identity", e.cfg.Identity)
	for {
		lock := &interruptibleLock{Interface: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: e.cfg.Namespace, Name: e.cfg.Name},
			Client:     e.client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: e.cfg.Identity},
		}}
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:            lock,
			LeaseDuration:   e.cfg.LeaseDuration,
			RenewDeadline:   e.cfg.RenewDeadline,
			RetryPeriod:     e.cfg.RetryPeriod,
			ReleaseOnCancel: true,
			WatchDog:        e.watchdog,
			Name:            e.cfg.Name,
			Callbacks:       callbacks,
		})
		if err != nil {
			return fmt.Errorf("leader election: %w", err)
		}
		attemptCtx, cancelAttempt := context.WithCancel(electCtx)
		go func() {
			select {
			case <-released:
				// The holder released the Lease (a graceful shutdown). client-go would notice
				// only at its next retry, up to 2.2 retry periods away; start over instead, which
				// tries at once.
				if lock.interrupt(cancelAttempt) {
					logger.V(2).Info("Lease released by its holder, trying to acquire it now", "lease", e.cfg.Namespace+"/"+e.cfg.Name)
				}
			case <-attemptCtx.Done():
			}
		}()
		le.Run(attemptCtx)
		cancelAttempt()
		startMu.Lock()
		wasStarted := started
		startMu.Unlock()
		if wasStarted || electCtx.Err() != nil {
			break
		}
	}

	// We cancel electCtx ourselves only after lead returned or on shutdown; if the election
	// ended with electCtx still live, renewal failed and the Lease is gone.
	if electCtx.Err() == nil && ctx.Err() == nil {
		return ErrLeaseLost
	}
	select {
	case err := <-leadDone:
		if err == nil && ctx.Err() != nil {
			logger.Info("Released the Lease", "lease", e.cfg.Namespace+"/"+e.cfg.Name)
		}
		return err
	default:
		return nil
	}
}
