package testenv

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

var env *Env

func TestMain(m *testing.M) { Main(m, &env) }

func TestControlPlaneServesAndAudits(t *testing.T) {
	Require(t, env)
	ctx := context.Background()
	ns := env.Namespace(t)

	cfg := rest.CopyConfig(env.Config)
	cfg.UserAgent = "testenv-probe/v0"
	client := kubernetes.NewForConfigOrDie(cfg)
	if _, err := client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().ConfigMaps(ns).Get(ctx, "x", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	writes, err := env.Writes(ByUserAgentPrefix("testenv-probe/", "configmaps"))
	if err != nil {
		t.Fatal(err)
	}
	// One create; the get is a read and is not audited.
	if len(writes) != 1 || writes[0].Verb != "create" || writes[0].ObjectRef.Namespace != ns {
		t.Fatalf("audited writes = %+v, want exactly the one create in %s", writes, ns)
	}
}

func TestRBACIsEnforced(t *testing.T) {
	Require(t, env)
	cfg := rest.AnonymousClientConfig(env.Config)
	cfg.BearerToken = "not-a-token"
	_, err := kubernetes.NewForConfigOrDie(cfg).CoreV1().Namespaces().List(context.Background(), metav1.ListOptions{})
	if !apierrors.IsUnauthorized(err) {
		t.Fatalf("bad token: err = %v, want 401", err)
	}
}

func TestMissingBinariesNameTheMakeTarget(t *testing.T) {
	_, err := Start(Options{BinDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "make tools") {
		t.Fatalf("err = %v, want a message naming `make tools`", err)
	}
}
