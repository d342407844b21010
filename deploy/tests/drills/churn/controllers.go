package churn

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// --- endpoints: a Pod's readiness flips; Endpoints and the EndpointSlice follow.

// webIP is the endpoints loop's Pod's address (TEST-NET-2: routed nowhere).
const webIP = "198.18.0.10"

func (c *Churn) endpointsLoop() *Loop {
	cl, ns := c.cfg.Client, c.ns(Endpoints)
	return &Loop{
		name: Endpoints,
		step: func(ctx context.Context, i int) (time.Time, string, func(context.Context) (bool, error), error) {
			ready := i%2 == 1 // the Pod starts Ready: change 0 makes it not ready
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				pod, err := cl.CoreV1().Pods(ns).Get(ctx, "web", metav1.GetOptions{})
				if err != nil {
					return err
				}
				pod.Status.Conditions = readyConditions(ready)
				_, err = cl.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
				return err
			})
			at := time.Now()
			return at, fmt.Sprintf("Pod web ready=%v", ready), func(ctx context.Context) (bool, error) {
				return endpointsShow(ctx, cl, ns, ready)
			}, err
		},
		final: func(ctx context.Context) (bool, string, error) {
			pod, err := cl.CoreV1().Pods(ns).Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return false, "", err
			}
			ready := podReady(pod)
			ok, err := endpointsShow(ctx, cl, ns, ready)
			return ok, fmt.Sprintf("Endpoints and EndpointSlice show Pod web ready=%v", ready), err
		},
	}
}

// endpointsShow reports whether both Endpoints web and its EndpointSlice show the Pod with
// the given readiness.
func endpointsShow(ctx context.Context, c kubernetes.Interface, ns string, ready bool) (bool, error) {
	ep, err := c.CoreV1().Endpoints(ns).Get(ctx, "web", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	in := func(addrs []corev1.EndpointAddress) bool {
		return slices.ContainsFunc(addrs, func(a corev1.EndpointAddress) bool { return a.IP == webIP })
	}
	okEP := false
	for _, s := range ep.Subsets {
		if (ready && in(s.Addresses) && !in(s.NotReadyAddresses)) || (!ready && in(s.NotReadyAddresses) && !in(s.Addresses)) {
			okEP = true
		}
	}
	if !okEP {
		return false, nil
	}
	eps, err := c.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=web"})
	if err != nil {
		return false, err
	}
	for _, s := range eps.Items {
		for _, e := range s.Endpoints {
			if slices.Contains(e.Addresses, webIP) && e.Conditions.Ready != nil && *e.Conditions.Ready == ready {
				return true, nil
			}
		}
	}
	return false, nil
}

func readyConditions(ready bool) []corev1.PodCondition {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	now := metav1.Now()
	return []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
		{Type: corev1.PodReady, Status: st, LastTransitionTime: now},
		{Type: corev1.ContainersReady, Status: st, LastTransitionTime: now},
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// --- quota: a Pod counted by a ResourceQuota is created (admission charges it) and deleted
// (only the controller gives it back).

// quotaPod is an unscheduled Pod of the quota loop: no scheduler answers to its scheduler
// name, so no kubelet ever runs it and a delete removes it at once.
func (c *Churn) quotaPod(name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.ns(Quota)},
		Spec: corev1.PodSpec{SchedulerName: c.cfg.Prefix + "-no-scheduler", Containers: []corev1.Container{{Name: "c", Image: "q"}}}}
}

func (c *Churn) quotaLoop() *Loop {
	cl, ns := c.cfg.Client, c.ns(Quota)
	usedIs := func(ctx context.Context, want int64) (bool, error) {
		q, err := cl.CoreV1().ResourceQuotas(ns).Get(ctx, "q", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		used, ok := q.Status.Used[corev1.ResourcePods]
		return ok && used.Value() == want, nil
	}
	return &Loop{
		name: Quota,
		step: func(ctx context.Context, i int) (time.Time, string, func(context.Context) (bool, error), error) {
			name := fmt.Sprintf("q-%d", i)
			if _, err := cl.CoreV1().Pods(ns).Create(ctx, c.quotaPod(name), metav1.CreateOptions{}); err != nil {
				return time.Time{}, "", nil, err
			}
			// Unscheduled: deleted at once, no kubelet involved.
			err := cl.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
			at := time.Now()
			return at, "Pod " + name + " deleted -> quota used pods=1", func(ctx context.Context) (bool, error) { return usedIs(ctx, 1) }, err
		},
		final: func(ctx context.Context) (bool, string, error) {
			ok, err := usedIs(ctx, 1)
			return ok, "ResourceQuota q used pods=1 (the one long-lived Pod)", err
		},
	}
}

// --- namespace: a namespace with content is deleted; it must go.

func (c *Churn) namespaceLoop() *Loop {
	cl, prefix := c.cfg.Client, c.cfg.Prefix+"-ns-"
	gone := func(ctx context.Context, name string) (bool, error) {
		_, err := cl.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	}
	return &Loop{
		name: Namespace,
		step: func(ctx context.Context, i int) (time.Time, string, func(context.Context) (bool, error), error) {
			name := fmt.Sprintf("%s%d", prefix, i)
			if _, err := cl.CoreV1().Namespaces().Create(ctx, c.namespace(name), metav1.CreateOptions{}); err != nil {
				return time.Time{}, "", nil, err
			}
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: name}}
			if _, err := cl.CoreV1().ConfigMaps(name).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
				return time.Time{}, "", nil, err
			}
			err := cl.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
			at := time.Now()
			return at, "namespace " + name + " deleted", func(ctx context.Context) (bool, error) { return gone(ctx, name) }, err
		},
		final: func(ctx context.Context) (bool, string, error) {
			list, err := cl.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, "", err
			}
			for _, ns := range list.Items {
				if strings.HasPrefix(ns.Name, prefix) {
					return false, "namespace " + ns.Name + " still there", nil
				}
			}
			return true, "every churn namespace gone", nil
		},
	}
}

// --- pvbinder: a claim against a matching static volume must bind; both are deleted after.

func (c *Churn) pvLoop() *Loop {
	cl, ns := c.cfg.Client, c.ns(PVBinder)
	bound := func(ctx context.Context, name string) (bool, error) {
		pvc, err := cl.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return pvc.Status.Phase == corev1.ClaimBound && pvc.Spec.VolumeName != "", nil
	}
	var live atomic.Int64 // the last claim left in place at the end
	live.Store(-1)
	pvName := func(i int64) string { return fmt.Sprintf("%s-%d", c.cfg.Prefix, i) }
	return &Loop{
		name: PVBinder,
		step: func(ctx context.Context, i int) (time.Time, string, func(context.Context) (bool, error), error) {
			name := pvName(int64(i))
			class := c.storageClass()
			pv := &corev1.PersistentVolume{
				ObjectMeta: metav1.ObjectMeta{Name: name, Labels: c.labels()},
				Spec: corev1.PersistentVolumeSpec{
					Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
					AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
					StorageClassName:              class,
					PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp/" + name}},
				},
			}
			if _, err := cl.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
				return time.Time{}, "", nil, err
			}
			// A claim synced before the binder's cache holds its volume waits for the binder's
			// periodic resync (15 s): that is the binder's own latency, not a gap in ownership.
			sleep(ctx, time.Second)
			pvc := &corev1.PersistentVolumeClaim{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					StorageClassName: &class,
					Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
				},
			}
			_, err := cl.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{})
			at := time.Now()
			return at, "claim " + name + " created", func(ctx context.Context) (bool, error) { return bound(ctx, name) }, err
		},
		// The previous claim and volume go once this one is bound: a handful of objects live.
		after: func(ctx context.Context, i int) {
			if prev := live.Swap(int64(i)); prev >= 0 {
				_ = cl.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, pvName(prev), metav1.DeleteOptions{})
				_ = cl.CoreV1().PersistentVolumes().Delete(ctx, pvName(prev), metav1.DeleteOptions{})
			}
		},
		final: func(ctx context.Context) (bool, string, error) {
			list, err := cl.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, "", err
			}
			for _, pvc := range list.Items {
				if pvc.DeletionTimestamp == nil && pvc.Status.Phase != corev1.ClaimBound {
					return false, "claim " + pvc.Name + " not bound", nil
				}
			}
			return true, "every live claim bound", nil
		},
	}
}

// --- servicelb: a LoadBalancer Service gets an address from the pool.

func (c *Churn) serviceLBLoop() *Loop {
	cl, ns := c.cfg.Client, c.ns(ServiceLB)
	has := func(ctx context.Context, name string) (bool, error) {
		svc, err := cl.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return len(svc.Status.LoadBalancer.Ingress) > 0, nil
	}
	return &Loop{
		name: ServiceLB,
		step: func(ctx context.Context, i int) (time.Time, string, func(context.Context) (bool, error), error) {
			name := fmt.Sprintf("lb-%d", i)
			svc := &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
				Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
					Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
			}
			_, err := cl.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
			at := time.Now()
			return at, "Service " + name + " created", func(ctx context.Context) (bool, error) { return has(ctx, name) }, err
		},
		// At most 3 live: deleted only while the controller runs (this step's effect just
		// appeared), which removes its finalizer.
		after: func(ctx context.Context, i int) {
			if i >= 3 {
				_ = cl.CoreV1().Services(ns).Delete(ctx, fmt.Sprintf("lb-%d", i-3), metav1.DeleteOptions{})
			}
		},
		final: func(ctx context.Context) (bool, string, error) {
			list, err := cl.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, "", err
			}
			for _, s := range list.Items {
				if s.DeletionTimestamp == nil && len(s.Status.LoadBalancer.Ingress) == 0 {
					return false, "Service " + s.Name + " has no address", nil
				}
			}
			return true, "every live LoadBalancer Service has an address", nil
		},
	}
}

// --- nodelifecycle: a Node whose Lease stops being renewed turns NotReady and tainted; renewed
// and Ready again, its taint goes.

const unreachableTaint = "node.kubernetes.io/unreachable"

func (c *Churn) nodeLoop() *Loop {
	f := c.nodes
	flap := f.flap
	state := func(ctx context.Context) (ready corev1.ConditionStatus, tainted bool, err error) {
		node, err := f.c.CoreV1().Nodes().Get(ctx, flap, metav1.GetOptions{})
		if err != nil {
			return "", false, err
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				ready = c.Status
			}
		}
		tainted = slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == unreachableTaint })
		return ready, tainted, nil
	}
	return &Loop{
		name: NodeLifecycle,
		step: func(ctx context.Context, i int) (time.Time, string, func(context.Context) (bool, error), error) {
			if i%2 == 0 {
				// Silence: the change "happens" when the grace period after the last renewal runs
				// out. The Node is first left healthy for a few renewals.
				sleep(ctx, 3*time.Second)
				at := f.silence(flap)
				return at, "Node " + flap + " silent", func(ctx context.Context) (bool, error) {
					ready, tainted, err := state(ctx)
					return ready == corev1.ConditionUnknown && tainted, err
				}, nil
			}
			// Back: the kubelet posts Ready and renews again.
			err := f.markReady(ctx, flap)
			at := time.Now()
			f.speak(flap, at) // the status heartbeat is a renewal too
			return at, "Node " + flap + " Ready again", func(ctx context.Context) (bool, error) {
				ready, tainted, err := state(ctx)
				return ready == corev1.ConditionTrue && !tainted, err
			}, err
		},
		// The Node is back and Ready in the end (the churn's last step is awaited either way):
		// its state must match what its kubelet says.
		final: func(ctx context.Context) (bool, string, error) {
			silent := f.isSilent(flap)
			ready, tainted, err := state(ctx)
			if silent {
				return ready == corev1.ConditionUnknown && tainted, "silent Node NotReady and tainted", err
			}
			return ready == corev1.ConditionTrue && !tainted, "renewing Node Ready, not tainted", err
		},
	}
}
