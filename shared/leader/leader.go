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
	"time"

	"github.com/prometheus/client_golang/prometheus"
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

// Log messages of a handover, in the order a SIGTERM brings them: end-to-end tests read
// their timestamps from the Pods' logs (see "Handover" in shared/README.md).
const (
	// MsgFenced: the controller has drained and returned; its writes are refused from now on,
	// and the release follows. "drained" is the time since the shutdown began.
	MsgFenced = "Writes fenced, releasing the Lease"
	// MsgReleased: the release landed (logged once it did).
	MsgReleased = "Released the Lease"
	// MsgStartedLeading: this process holds the Lease; its controller starts building caches.
	MsgStartedLeading = "Started leading"
	// MsgSynced (logged by shared/app): the term's controllers have all synced and may write.
	// After a handover, its time minus the old leader's MsgFenced is the time without a writer.
	MsgSynced = "Controllers synced, writing"
)

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
