package churn

import (
	"context"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// nodeLeaseNamespace holds the kubelets' Leases.
const nodeLeaseNamespace = "kube-node-lease"

// zoneLabel is the Node label the node lifecycle controller groups Nodes by.
const zoneLabel = "topology.kubernetes.io/zone"

// fakeNodes plays the kubelets of the churn's Nodes: it renews each one's Lease every second,
// except a silent one's. It creates, reads and writes only the Nodes and Leases it names.
type fakeNodes struct {
	c kubernetes.Interface
	// names are the Nodes it plays, flap among them; the endpoints loop's Pod is on names[0].
	names []string
	flap  string
	grace time.Duration
	// version is the kubelet version each Node's status reports (none if empty).
	version string
	// labels are every fake Node's and Lease's.
	labels map[string]string

	mu     sync.Mutex
	silent map[string]bool
	// renewed is when each Lease's last renewal was answered.
	renewed map[string]time.Time
}

func (f *fakeNodes) setup(ctx context.Context) error {
	for _, name := range f.names {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: f.labels}}
		if _, err := f.c.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			return err
		}
		if err := f.markReady(ctx, name); err != nil {
			return err
		}
		hold, dur := name, int32(f.grace/time.Second)
		lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: nodeLeaseNamespace, Labels: f.labels},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &hold, LeaseDurationSeconds: &dur, RenewTime: &metav1.MicroTime{Time: time.Now()}}}
		if _, err := f.c.CoordinationV1().Leases(nodeLeaseNamespace).Create(ctx, lease, metav1.CreateOptions{}); err != nil {
			return err
		}
		f.mu.Lock()
		f.renewed[name] = time.Now()
		f.mu.Unlock()
	}
	return nil
}

// markReady posts a Ready status, as a kubelet does on start and on each status report.
func (f *fakeNodes) markReady(ctx context.Context, name string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := f.c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
			Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now}}
		node.Status.NodeInfo.KubeletVersion = f.version
		_, err = f.c.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
		return err
	})
}

// renew runs until ctx ends. Each renewal holds mu from the silence check to its answer, so
// that a Node silenced meanwhile is not renewed behind the churn's back and renewed is the
// last renewal the controller can have seen.
func (f *fakeNodes) renew(ctx context.Context) {
	for ctx.Err() == nil {
		for _, name := range f.names {
			f.renewOne(ctx, name)
		}
		sleep(ctx, time.Second)
	}
}

func (f *fakeNodes) renewOne(ctx context.Context, name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.silent[name] {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	lease, err := f.c.CoordinationV1().Leases(nodeLeaseNamespace).Get(rctx, name, metav1.GetOptions{})
	if err != nil {
		return
	}
	lease.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
	if _, err := f.c.CoordinationV1().Leases(nodeLeaseNamespace).Update(rctx, lease, metav1.UpdateOptions{}); err == nil {
		f.renewed[name] = time.Now()
	}
}

// silence stops renewing name's Lease and returns when its grace period runs out: from then
// on the node lifecycle controller is to mark it NotReady.
func (f *fakeNodes) silence(name string) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.silent[name] = true
	return f.renewed[name].Add(f.grace)
}

// speak renews name's Lease again; at is its kubelet's last report.
func (f *fakeNodes) speak(name string, at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.silent[name] = false
	f.renewed[name] = at
}

func (f *fakeNodes) isSilent(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.silent[name]
}
