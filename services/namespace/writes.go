package namespace

import (
	"context"
	"errors"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
)

// errReplaced stops a write when the namespace of that name is no longer the one this sync
// started with: it was finalized by someone else and created again.
var errReplaced = errors.New("namespace was replaced (its UID changed)")

// conflictBackoff paces the re-reads and re-writes of one namespace whose writes keep
// conflicting (other controllers edit its status or finalizers too): six tries with about
// 0.6 s of pauses in all, then the sync ends with the error and the queue retries it with its own backoff,
// so a namespace that is written to all the time never makes a worker spin.
var conflictBackoff = wait.Backoff{Duration: 20 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 6, Cap: time.Second}

// update applies write to ns, and on a conflict to the latest version of the same
// namespace (same UID), a bounded number of times. It returns nil, nil when the namespace
// is gone or was replaced: nothing is left to do for this one. Conflicts beyond the bound
// are returned, with one Warning Event per episode (until a write goes through).
func (c *Controller) update(ctx context.Context, ns *v1.Namespace, write func(*v1.Namespace) (*v1.Namespace, error)) (*v1.Namespace, error) {
	logger := klog.FromContext(ctx)
	backoff := c.conflictBackoff
	for {
		out, err := write(ns)
		if err == nil {
			c.endConflicts(ns.UID)
			return out, nil
		}
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		if !apierrors.IsConflict(err) {
			return nil, err
		}
		if backoff.Steps <= 1 {
			c.reportConflicts(ns, err)
			return nil, fmt.Errorf("writing namespace %s: still conflicting after %d tries: %w", ns.Name, c.conflictBackoff.Steps, err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(backoff.Step()):
		}
		latest, err := c.namespaces.Get(ctx, ns.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		if latest.UID != ns.UID {
			logger.Info("Namespace was replaced, leaving the new one alone", "oldUID", ns.UID, "uid", latest.UID, "reason", StopReplaced)
			c.metrics.stopped.WithLabelValues(StopReplaced).Inc()
			return nil, errReplaced
		}
		logger.V(2).Info("Namespace changed under a write, retrying on the latest version", "resourceVersion", latest.ResourceVersion)
		ns = latest
	}
}

// reportConflicts records the first time writes to ns give up on conflicts since the last
// write that went through: one Event per episode, however many retries the queue makes.
func (c *Controller) reportConflicts(ns *v1.Namespace, err error) {
	c.mu.Lock()
	first := !c.conflicting[ns.UID]
	c.conflicting[ns.UID] = true
	c.mu.Unlock()
	if first && c.recorder != nil {
		c.recorder.Eventf(ns, v1.EventTypeWarning, EventUpdateConflict,
			"Writing the namespace keeps conflicting with other writers; retrying with backoff: %v", err)
	}
}

func (c *Controller) endConflicts(uid types.UID) {
	c.mu.Lock()
	delete(c.conflicting, uid)
	c.mu.Unlock()
}

func ignoreGone(err error) error {
	if errors.Is(err, errReplaced) {
		return nil
	}
	return err
}
