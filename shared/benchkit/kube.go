package benchkit

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kcm-split/kcm-split/shared/testenv"
)

// Client returns a clientset for base (its rate limits kept) with userAgent, speaking
// protobuf as both controllers do: the benchmark's own fixtures and watchers should not be
// the slow part. The user agent keeps the benchmark's requests apart from the controller's in
// the audit log.
func Client(tb testing.TB, base *rest.Config, userAgent string) kubernetes.Interface {
	tb.Helper()
	cfg := rest.CopyConfig(base)
	cfg.UserAgent = userAgent
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// CreateNamespaces creates the namespaces names, failing tb on any error.
func CreateNamespaces(ctx context.Context, tb testing.TB, client kubernetes.Interface, names ...string) {
	tb.Helper()
	for _, name := range names {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			tb.Fatalf("creating namespace %s: %v", name, err)
		}
	}
}

// Writes returns the writes in env's audit log that every filter keeps (for example
// testenv.ByUserAgentPrefix and InNamespace), failing tb when the log cannot be read. The
// audit log is written in blocking mode, so every write a client saw answered is in it.
// Failed writes are there too: they cost the apiserver as much.
func Writes(tb testing.TB, env *testenv.Env, filters ...func(testenv.AuditEvent) bool) []testenv.AuditEvent {
	tb.Helper()
	evs, err := env.Writes(func(ev testenv.AuditEvent) bool {
		for _, keep := range filters {
			if !keep(ev) {
				return false
			}
		}
		return true
	})
	if err != nil {
		tb.Fatalf("reading the audit log: %v", err)
	}
	return evs
}

// CountWrites is len(Writes(...)).
func CountWrites(tb testing.TB, env *testenv.Env, filters ...func(testenv.AuditEvent) bool) int {
	tb.Helper()
	return len(Writes(tb, env, filters...))
}

// InNamespace keeps audit events on objects in one of namespaces.
func InNamespace(namespaces ...string) func(testenv.AuditEvent) bool {
	return func(ev testenv.AuditEvent) bool { return slices.Contains(namespaces, ev.ObjectRef.Namespace) }
}
