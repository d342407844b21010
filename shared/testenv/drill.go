package testenv

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// ShortLeaseFlags are the leader-election timings of a handover drill, a fresh slice each call
// (append to it freely). A drill kills its leader with SIGKILL, so the standby waits out the
// whole Lease: 4s instead of upstream's 15s keeps each takeover within seconds. The renew
// deadline (3s) must stay below the lease duration, and above 1.2 retry periods (250ms), or
// the binary refuses to start: upstream's validation, which shared/leader enforces the same.
func ShortLeaseFlags() []string {
	return []string{"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=250ms"}
}

// DeleteKeptOnCleanup deletes, when the test ends, the ConfigMaps names in kube-system (what a
// leader keeps beside its Lease for the next one), so that a later test's leader does not take
// them over. One already gone is fine; another error is logged, not failed. Call it before
// starting the controllers: cleanups run last registered first, so the ConfigMaps go once the
// processes have stopped and cannot write them again.
func DeleteKeptOnCleanup(t testing.TB, c kubernetes.Interface, names ...string) {
	t.Cleanup(func() {
		for _, name := range names {
			err := c.CoreV1().ConfigMaps(metav1.NamespaceSystem).Delete(context.Background(), name, metav1.DeleteOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				t.Logf("deleting the kept ConfigMap %s/%s: %v", metav1.NamespaceSystem, name, err)
			}
		}
	})
}
