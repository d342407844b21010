package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
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

	client := env.ClientAs(t, "testenv-probe/v0")
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

// A package's own audit policy (here: reads too) replaces the default one; Writes still
// returns only writes, Audit everything recorded. Setup runs before Start returns.
func TestAuditPolicyAndSetup(t *testing.T) {
	Require(t, env)
	const policy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  userGroups: ["system:masters"]
- level: None
`
	var setupSaw string
	e, err := Start(Options{AuditPolicy: policy, Setup: func(e *Env) error {
		_, err := e.Client(t).CoreV1().ConfigMaps("default").Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "seeded"}}, metav1.CreateOptions{})
		setupSaw = e.Host
		return err
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Stop()
	if setupSaw != e.Host {
		t.Fatalf("Setup ran against %q, want the new apiserver %s", setupSaw, e.Host)
	}
	client := e.ClientAs(t, "testenv-policy/v0")
	if _, err := client.CoreV1().ConfigMaps("default").Get(context.Background(), "seeded", metav1.GetOptions{}); err != nil {
		t.Fatalf("the object Setup created: %v", err)
	}
	if err := client.CoreV1().ConfigMaps("default").Delete(context.Background(), "seeded", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	all, err := e.Audit(ByUserAgentPrefix("testenv-policy/", "configmaps"))
	if err != nil {
		t.Fatal(err)
	}
	writes, err := e.Writes(ByUserAgentPrefix("testenv-policy/", "configmaps"))
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all[0].Verb != "get" || all[1].Verb != "delete" {
		t.Fatalf("audited = %+v, want the get and the delete (the policy records reads)", all)
	}
	if len(writes) != 1 || writes[0].Verb != "delete" {
		t.Fatalf("writes = %+v, want the delete alone", writes)
	}
}

// A failing Setup fails Start and leaves nothing running or on disk.
func TestSetupErrorStopsTheControlPlane(t *testing.T) {
	Require(t, env)
	var started *Env
	_, err := Start(Options{Setup: func(e *Env) error {
		started = e
		return errors.New("no CRDs today")
	}})
	if err == nil || !strings.Contains(err.Error(), "no CRDs today") {
		t.Fatalf("Start = %v, want Setup's error", err)
	}
	if started == nil {
		t.Fatal("Setup never ran")
	}
	if !started.apiserver.Exited() || !started.etcd.Exited() {
		t.Error("etcd or kube-apiserver still running")
	}
	if _, err := os.Stat(started.Dir); !os.IsNotExist(err) {
		t.Errorf("%s still there: %v", started.Dir, err)
	}
}

// keptOpen is a listener whose Close leaves the port taken, as another process that took
// the port between Start's pick and etcd's bind would.
type keptOpen struct{ net.Listener }

func (keptOpen) Close() error { return nil }

// When etcd cannot bind the port Start picked for it (another process took it), Start tries
// again on new ports, and the control plane it returns is on those.
func TestStartRetriesOnATakenPort(t *testing.T) {
	Require(t, env)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	hold := holdPorts
	defer func() { holdPorts = hold }()
	picks := 0
	holdPorts = func(n int) ([]net.Listener, error) {
		picks++
		held, err := hold(n)
		if err == nil && picks == 1 {
			_ = held[0].Close()
			held[0] = keptOpen{taken} // etcd's client port
		}
		return held, err
	}
	e, err := Start(Options{})
	if err != nil {
		t.Fatalf("Start with etcd's first port taken: %v", err)
	}
	defer e.Stop()
	if picks != 2 {
		t.Errorf("Start picked ports %d times, want 2 (one retry)", picks)
	}
	if strings.HasSuffix(e.EtcdURL, fmt.Sprintf(":%d", portOf(taken))) {
		t.Errorf("etcd at %s, the taken port", e.EtcdURL)
	}
	if _, err := e.Client(t).CoreV1().Namespaces().Get(context.Background(), "default", metav1.GetOptions{}); err != nil {
		t.Errorf("the control plane of the second try: %v", err)
	}
}

// Without the taken port in its log, a process that exits during start-up is not retried.
func TestStartDoesNotRetryOtherFailures(t *testing.T) {
	Require(t, env)
	picks := 0
	hold := holdPorts
	defer func() { holdPorts = hold }()
	holdPorts = func(n int) ([]net.Listener, error) { picks++; return hold(n) }
	_, err := Start(Options{ExtraAPIServerArgs: []string{"--no-such-flag"}})
	if err == nil || errors.Is(err, errAddrInUse) {
		t.Fatalf("Start with a bad apiserver flag = %v, want a failure other than a taken port", err)
	}
	if picks != 1 {
		t.Errorf("Start picked ports %d times, want 1 (no retry)", picks)
	}
}
