// Writes to Services: the finalizer and the status, conditioned on the resourceVersion read,
// and the backoff against a second writer that keeps changing our status (allocation decides it).

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

// overwriteBackoff decides whether desired may be written now, when svc's status is not
// what this controller last wrote although it still wants the same: someone else changed
// it. It returns how long to wait (0: write now) and whether a new episode began.
func (c *Controller) overwriteBackoff(key string, svc *v1.Service, desired []v1.LoadBalancerIngress) (time.Duration, bool) {
	wait, newEpisode, rewrite := c.state.OverwriteBackoff(key, svc.UID, svc.Status.LoadBalancer.Ingress, desired, c.now())
	if rewrite {
		c.metrics.conflicts.WithLabelValues(conflictOverwritten).Inc()
	}
	return wait, newEpisode
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
	c.recordOwnWrite(svc, out, err)
	return out, err
}

// recordOwnWrite records svc's version as outdated after a write that changed it.
func (c *Controller) recordOwnWrite(svc, out *v1.Service, err error) {
	if err == nil && out != nil && out.ResourceVersion != svc.ResourceVersion {
		c.stale.Wrote(svc.Namespace+"/"+svc.Name, svc.ResourceVersion, out)
	}
}

func (c *Controller) removeFinalizer(ctx context.Context, svc *v1.Service) error {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"$deleteFromPrimitiveList/finalizers": []string{FinalizerLoadBalancerCleanup}}})
	out, err := c.client.CoreV1().Services(svc.Namespace).Patch(ctx, svc.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	c.recordOwnWrite(svc, out, err)
	return err
}

// patchIngress replaces status.loadBalancer.ingress; a merge patch replaces the whole list.
func (c *Controller) patchIngress(ctx context.Context, svc *v1.Service, ingress []v1.LoadBalancerIngress) error {
	_, err := c.patchStatus(ctx, svc, map[string]any{"loadBalancer": map[string]any{"ingress": nilIfEmpty(ingress)}})
	return err
}

// patchConditions replaces status.conditions with conds (svc's own, with ours changed).
func (c *Controller) patchConditions(ctx context.Context, svc *v1.Service, conds []metav1.Condition) (*v1.Service, error) {
	return c.patchStatus(ctx, svc, map[string]any{"conditions": nilIfEmpty(conds)})
}

// patchStatus merge-patches svc's status with status. The resourceVersion makes the write
// conditional: a decision made on an outdated Service (another writer came first) fails with
// a conflict instead of overwriting.
func (c *Controller) patchStatus(ctx context.Context, svc *v1.Service, status map[string]any) (*v1.Service, error) {
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": svc.ResourceVersion},
		"status":   status,
	})
	if err != nil {
		return nil, err
	}
	out, err := c.client.CoreV1().Services(svc.Namespace).Patch(ctx, svc.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	c.recordOwnWrite(svc, out, err)
	return out, err
}

// nilIfEmpty makes an empty list a JSON null, which a merge patch reads as "remove".
func nilIfEmpty[T any](l []T) any {
	if len(l) == 0 {
		return nil
	}
	return l
}

// ---- pools ----
