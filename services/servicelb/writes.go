// Writes to Services: the finalizer and the status, conditioned on the resourceVersion read,
// and the backoff against a second writer that keeps changing our status.

package servicelb

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Write wars: when the status this controller wrote is changed by someone else, it is put
// back at once, then after warBase, doubling, and after warMaxAttempts writes only every
// warSlow. An episode ends after warQuiet without an overwrite.
const (
	warBase        = 5 * time.Second
	warMaxAttempts = 5
	warSlow        = 5 * time.Minute
	warQuiet       = 10 * time.Minute
)

type writeWar struct {
	attempts int
	seen     time.Time // last time an overwrite was seen
	next     time.Time // no write before
}

// overwriteBackoff decides whether desired may be written now, when svc's status is not
// what this controller last wrote although it still wants the same: someone else changed
// it. It returns how long to wait (0: write now) and whether a new episode began.
func (c *Controller) overwriteBackoff(key string, svc *v1.Service, desired []v1.LoadBalancerIngress) (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	last, ok := c.lastWritten[key]
	if !ok || !ingressEqual(last, desired) || ingressEqual(svc.Status.LoadBalancer.Ingress, last) {
		return 0, false
	}
	now := c.now()
	w := c.wars[key]
	newEpisode := false
	if w == nil || now.Sub(w.seen) > warQuiet {
		w = &writeWar{}
		c.wars[key] = w
		newEpisode = true
	}
	w.seen = now
	if now.Before(w.next) {
		return w.next.Sub(now), newEpisode
	}
	w.attempts++
	delay := warSlow
	if w.attempts < warMaxAttempts {
		delay = warBase << (w.attempts - 1)
	}
	w.next = now.Add(delay)
	c.metrics.conflicts.WithLabelValues(conflictOverwritten).Inc()
	return 0, newEpisode
}

func describeIngress(in []v1.LoadBalancerIngress) string {
	var s []string
	for _, i := range in {
		s = append(s, i.IP+i.Hostname)
	}
	return strings.Join(s, ",")
}

func (c *Controller) addFinalizer(ctx context.Context, svc *v1.Service) (*v1.Service, error) {
	// A strategic merge patch appends to the finalizer list without replacing what others
	// put there meanwhile.
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": []string{FinalizerLoadBalancerCleanup}}})
	out, err := c.client.CoreV1().Services(svc.Namespace).Patch(ctx, svc.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	c.replaced(svc, out, err)
	return out, err
}

// replaced records svc's version as outdated after a write that changed it.
func (c *Controller) replaced(svc, out *v1.Service, err error) {
	if err == nil && out != nil && out.ResourceVersion != svc.ResourceVersion {
		c.stale.Wrote(svc.Namespace+"/"+svc.Name, svc.ResourceVersion, out)
	}
}

func (c *Controller) removeFinalizer(ctx context.Context, svc *v1.Service) error {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"$deleteFromPrimitiveList/finalizers": []string{FinalizerLoadBalancerCleanup}}})
	out, err := c.client.CoreV1().Services(svc.Namespace).Patch(ctx, svc.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	c.replaced(svc, out, err)
	return err
}

// patchIngress replaces status.loadBalancer.ingress; a merge patch replaces the whole list.
func (c *Controller) patchIngress(ctx context.Context, svc *v1.Service, ingress []v1.LoadBalancerIngress) error {
	var value any = ingress
	if len(ingress) == 0 {
		value = nil
	}
	// The resourceVersion makes the write conditional: a decision made on an outdated
	// Service (another writer came first) fails with a conflict instead of overwriting.
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": svc.ResourceVersion},
		"status":   map[string]any{"loadBalancer": map[string]any{"ingress": value}},
	})
	if err != nil {
		return err
	}
	out, err := c.client.CoreV1().Services(svc.Namespace).Patch(ctx, svc.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	c.replaced(svc, out, err)
	return err
}

// ---- pools ----
