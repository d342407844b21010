package testenv

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kcm-split/kcm-split/shared/leader"
)

// The drill's timings pass the binaries' own validation, and each call is a slice of its own.
func TestShortLeaseFlags(t *testing.T) {
	cfg := leader.Config{Enabled: true, Namespace: "kube-system", Name: "drill"}
	durations := map[string]*time.Duration{
		"--leader-elect-lease-duration": &cfg.LeaseDuration,
		"--leader-elect-renew-deadline": &cfg.RenewDeadline,
		"--leader-elect-retry-period":   &cfg.RetryPeriod,
	}
	flags := ShortLeaseFlags()
	for _, f := range flags {
		name, value, _ := strings.Cut(f, "=")
		d, err := time.ParseDuration(value)
		if err != nil || durations[name] == nil {
			t.Fatalf("flag %q: not one of %v with a duration (%v)", f, durations, err)
		}
		*durations[name] = d
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("%v: %v", flags, err)
	}
	if cfg.LeaseDuration > 5*time.Second {
		t.Errorf("lease duration %s: a drill's takeover waits all of it", cfg.LeaseDuration)
	}
	flags[0] = "changed"
	if ShortLeaseFlags()[0] == "changed" {
		t.Error("ShortLeaseFlags shares its slice between calls")
	}
}

// cleanupRecorder is a testing.TB whose cleanups run when the test says so and whose log is kept.
type cleanupRecorder struct {
	testing.TB
	cleanups []func()
	logs     []string
}

func (r *cleanupRecorder) Cleanup(f func()) { r.cleanups = append(r.cleanups, f) }

func (r *cleanupRecorder) Logf(format string, args ...any) {
	r.logs = append(r.logs, fmt.Sprintf(format, args...))
}

func (r *cleanupRecorder) runCleanups() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
}

// The kept ConfigMaps stay until the test ends, then go; one already gone is not reported,
// while a delete the apiserver refuses is.
func TestDeleteKeptOnCleanup(t *testing.T) {
	Require(t, env)
	ctx := context.Background()
	client := env.Client(t)
	suffix, err := randomHex(3)
	if err != nil {
		t.Fatal(err)
	}
	kept := "drill-kept-" + suffix // its own name under -count
	if _, err := client.CoreV1().ConfigMaps(metav1.NamespaceSystem).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: kept}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	DeleteKeptOnCleanup(t, client, kept) // should the test stop before its own cleanup ran

	r := &cleanupRecorder{TB: t}
	DeleteKeptOnCleanup(r, client, kept, kept+"-never-written")
	if _, err := client.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, kept, metav1.GetOptions{}); err != nil {
		t.Fatalf("deleted before the test ended: %v", err)
	}
	if len(r.cleanups) != 1 {
		t.Fatalf("%d cleanups registered, want 1", len(r.cleanups))
	}
	r.runCleanups()
	if _, err := client.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, kept, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("kube-system/%s after the cleanup: err = %v, want NotFound", kept, err)
	}
	if len(r.logs) != 0 {
		t.Fatalf("a ConfigMap already gone was reported: %q", r.logs)
	}

	// An unauthenticated client: the apiserver refuses, and the cleanup says so.
	cfg := rest.AnonymousClientConfig(env.Config)
	cfg.BearerToken = "not-a-token"
	r = &cleanupRecorder{TB: t}
	DeleteKeptOnCleanup(r, kubernetes.NewForConfigOrDie(cfg), kept)
	r.runCleanups()
	if len(r.logs) != 1 || !strings.Contains(r.logs[0], "kube-system/"+kept) || !strings.Contains(r.logs[0], "Unauthorized") {
		t.Fatalf("refused delete logged as %q, want one line naming kube-system/%s and the 401", r.logs, kept)
	}
}
