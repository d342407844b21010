package app

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcm-split/kcm-split/shared/testenv"
)

// TestCheckOnTheRealAPIServer runs `check` against a binary leading on the real apiserver: it
// passes while the binary leads and is Ready, fails on the Lease once the binary stopped
// (released), and fails on a Lease whose holder stopped renewing long ago.
func TestCheckOnTheRealAPIServer(t *testing.T) {
	testenv.Require(t, env)
	client := env.Client(t)
	ns := env.Namespace(t)
	check := func(args ...string) (int, string) {
		var out bytes.Buffer
		code := Run(context.Background(), testSpec(nil), append([]string{"test-controller", CheckCommand,
			"--kubeconfig=" + env.Kubeconfig, "--lease-namespace=" + ns}, args...), &out)
		return code, out.String()
	}

	m := startMember(t, ns, "checked")
	// Retries until the binary leads and its caches synced: the check's own bound is the wait.
	start := time.Now()
	code, out := check("--readyz-url="+m.base+"/readyz", "--lease=checked", "--attempts=8", "--timeout=60s")
	if code != ExitOK || !strings.Contains(out, "OK: "+m.base+"/readyz answered 200; Lease "+ns+"/checked held by ") {
		t.Fatalf("while leading: exit %d:\n%s", code, out)
	}
	t.Logf("check passed %.1fs after the binary started:\n%s", time.Since(start).Seconds(), out)

	m.cancel()
	select {
	case <-m.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("the binary did not stop")
	}
	code, out = check("--lease=checked", "--attempts=2")
	if code != ExitFailure || !strings.Contains(out, "FAIL: lease "+ns+"/checked has no holder") {
		t.Fatalf("after the binary released its Lease: exit %d:\n%s", code, out)
	}
	code, out = check("--readyz-url="+m.base+"/readyz", "--lease=checked", "--attempts=1")
	if code != ExitFailure || !strings.Contains(out, "connection refused; lease "+ns+"/checked has no holder") {
		t.Fatalf("after the binary stopped, both parts: exit %d:\n%s", code, out)
	}

	// A holder that stopped renewing (a frozen process, a partitioned node) without releasing.
	holder, renewed, seconds := "gone-pod_1", metav1.NewMicroTime(time.Now().Add(-time.Minute)), int32(15)
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "stale"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, RenewTime: &renewed, LeaseDurationSeconds: &seconds}}
	if _, err := client.CoordinationV1().Leases(ns).Create(context.Background(), l, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	code, out = check("--lease=stale", "--attempts=1")
	if code != ExitFailure || !strings.Contains(out, "FAIL: lease "+ns+"/stale held by gone-pod_1 expired ") {
		t.Fatalf("stale Lease: exit %d:\n%s", code, out)
	}
	t.Logf("failures as reported:\n%s", out)
}
