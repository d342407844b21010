package app

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcm-split/kcm-split/shared/app/check"
	"github.com/kcm-split/kcm-split/shared/testenv"
)

func TestBadFlagsExit2WithOneLine(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(garbage, []byte("clusters: {{{"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"negative qps", []string{"--kube-api-qps=-1"}, nil, "invalid value for --kube-api-qps"},
		{"qps from env", nil, map[string]string{"KCM_SPLIT_KUBE_API_QPS": "-5"}, "invalid value for --kube-api-qps"},
		{"renew >= lease", []string{"--leader-elect-renew-deadline=15s"}, nil, "invalid value for --leader-elect-renew-deadline"},
		{"unknown log level", []string{"--log-level=loud"}, nil, "invalid value for --log-level"},
		{"unknown log format", []string{"--log-format=xml"}, nil, "invalid value for --log-format"},
		{"verbosity above 10", []string{"--v=11"}, nil, "invalid value for --v:"},
		{"negative verbosity", []string{"-v=-1"}, nil, "invalid value for --v:"},
		{"verbosity not a number", []string{"--v=loud"}, nil, "-v"},
		{"-v without a value", []string{"-v"}, nil, "-v"},
		{"verbosity from env", nil, map[string]string{"KCM_SPLIT_V": "11"}, "invalid value for --v:"},
		{"verbosity wins over a valid log level", []string{"--log-level=info", "--v=12"}, nil, "invalid value for --v:"},
		{"vmodule without level", []string{"--vmodule=foo"}, nil, "invalid value for --vmodule:"},
		{"vmodule level not a number", []string{"--vmodule=foo=x"}, nil, "invalid value for --vmodule:"},
		{"vmodule level above 10", []string{"--vmodule=foo=11"}, nil, "invalid value for --vmodule:"},
		{"vmodule from env", nil, map[string]string{"KCM_SPLIT_VMODULE": "=3"}, "invalid value for --vmodule:"},
		{"unknown logging format", []string{"--logging-format=xml"}, nil, "invalid value for --logging-format:"},
		{"logging format wins over a valid log format", []string{"--log-format=console", "--logging-format=xml"}, nil, "invalid value for --logging-format:"},
		{"logging format from env", nil, map[string]string{"KCM_SPLIT_LOGGING_FORMAT": "xml"}, "invalid value for --logging-format:"},
		{"missing kubeconfig", []string{"--kubeconfig=" + filepath.Join(dir, "nope")}, nil, "invalid value for --kubeconfig"},
		{"unparseable kubeconfig", []string{"--kubeconfig=" + garbage}, nil, "does not parse"},
		{"not a number", []string{"--kube-api-qps=fast"}, nil, "kube-api-qps"},
		{"unknown flag", []string{"--kube-api-qpz=1"}, nil, "kube-api-qpz"},
		{"controller flag", []string{"--concurrent-test-syncs=0"}, nil, "invalid value for --concurrent-test-syncs"},
		{"bad bind address", []string{"--metrics-bind-address=nope"}, nil, "invalid value for --metrics-bind-address"},
		{"missing certificate", []string{"--tls-cert-file=" + filepath.Join(dir, "nope.crt"), "--tls-private-key-file=" + garbage}, nil, "invalid value for --tls-cert-file"},
		{"unparseable certificate", []string{"--tls-cert-file=" + garbage, "--tls-private-key-file=" + garbage}, nil, "invalid value for --tls-cert-file"},
		{"key without certificate", []string{"--tls-private-key-file=" + garbage}, nil, "invalid value for --tls-cert-file"},
		{"unknown TLS version", []string{"--tls-min-version=VersionTLS10"}, nil, "invalid value for --tls-min-version"},
		{"secure port out of range", []string{"--secure-port=70000"}, nil, "invalid value for --secure-port"},
		{"bind address not an IP", []string{"--bind-address=example.com"}, nil, "invalid value for --bind-address"},
		{"missing authentication kubeconfig", []string{"--authentication-kubeconfig=" + filepath.Join(dir, "nope")}, nil, "invalid value for --authentication-kubeconfig"},
		{"relative always-allow path", []string{"--authorization-always-allow-paths=healthz"}, nil, "invalid value for --authorization-always-allow-paths"},
		{"unknown feature gate", []string{"--feature-gates=PodLevelResources=false,NoSuchGate=true"}, nil, "invalid value for --feature-gates: unrecognized feature gates: NoSuchGate"},
		{"locked feature gate", []string{"--feature-gates=OrderedNamespaceDeletion=false"}, nil, "invalid value for --feature-gates"},
		{"feature gate not a boolean", []string{"--feature-gates=PodLevelResources=yes please"}, nil, "invalid value for --feature-gates"},
		{"feature gate from env", nil, map[string]string{"KCM_SPLIT_FEATURE_GATES": "Bogus=true"}, "invalid value for --feature-gates: unrecognized feature gates: Bogus"},
		{"stray argument", []string{"extra"}, nil, "unexpected arguments"},
		{"migration without election", []string{"--enable-leader-migration", "--leader-elect=false"}, nil, "invalid value for --enable-leader-migration: needs --leader-elect"},
		{"missing migration config", []string{"--enable-leader-migration", "--leader-migration-config=" + filepath.Join(dir, "nope")}, nil, "invalid value for --leader-migration-config"},
		{"unparseable migration config", []string{"--enable-leader-migration", "--leader-migration-config=" + garbage}, nil, "invalid value for --leader-migration-config"},
		{"take-over without election", []string{"--take-over-from-kcm", "--leader-elect=false"}, nil, "invalid value for --take-over-from-kcm: needs --leader-elect"},
		{"take-over with migration", []string{"--take-over-from-kcm", "--enable-leader-migration"}, nil, "invalid value for --take-over-from-kcm: and --enable-leader-migration are two ways"},
		{"take-over with an empty selector", []string{"--take-over-from-kcm", "--kcm-pod-selector="}, nil, "invalid value for --kcm-pod-selector: empty"},
		{"take-over with a bad selector", []string{"--take-over-from-kcm", "--kcm-pod-selector=a b c"}, nil, "invalid value for --kcm-pod-selector"},
		{"take-over host without a node", []string{"--take-over-from-kcm", "--kcm-lease-host-nodes=vm"}, nil, `invalid value for --kcm-lease-host-nodes: "vm" is not host=node`},
		{"take-over host mapped twice", []string{"--take-over-from-kcm", "--kcm-lease-host-nodes=vm=a,VM=b"}, nil, `invalid value for --kcm-lease-host-nodes: host "vm" mapped to both "a" and "b"`},
		{"take-over without a namespace", []string{"--take-over-from-kcm", "--kcm-namespace="}, nil, "invalid value for --take-over-from-kcm: needs --kcm-namespace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var stderr bytes.Buffer
			code := Run(context.Background(), testSpec(nil), append([]string{"test-controller"}, tc.args...), &stderr)
			out := strings.TrimRight(stderr.String(), "\n")
			if code != ExitUsage {
				t.Fatalf("exit = %d, want %d; stderr:\n%s", code, ExitUsage, out)
			}
			if strings.Count(out, "\n") != 0 || !strings.Contains(out, tc.want) {
				t.Fatalf("stderr = %q, want one line containing %q", out, tc.want)
			}
		})
	}
}

func TestHelpShowsDefaultsAndEnv(t *testing.T) {
	var out bytes.Buffer
	if code := Run(context.Background(), testSpec(nil), []string{"test-controller", "--help"}, &out); code != ExitOK {
		t.Fatalf("--help exit = %d", code)
	}
	for _, want := range []string{
		"--kube-api-qps value", "(default: 20)", "$KCM_SPLIT_KUBE_API_QPS",
		"--leader-elect-resource-name value", `(default: "test-controller")`,
		"--leader-elect-lease-duration value", "(default: 15s)",
		"--concurrent-test-syncs value", "$KCM_SPLIT_CONCURRENT_TEST_SYNCS",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help lacks %q", want)
		}
	}
}

func TestHelpAndVersion(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"-h"}, []string{"NAME:\n   test-controller - ", "--concurrent-test-syncs value", "(default: 5)", "   Client\n"}},
		{[]string{"--leader-elect=false", "--help"}, []string{"--kube-api-qps value"}},
		{[]string{"--version"}, []string{"test-controller version " + Version + "\n"}},
		{[]string{"-version"}, []string{"test-controller version " + Version + "\n"}},
		{[]string{"--v=4", "--version"}, []string{"test-controller version " + Version + "\n"}},
		{[]string{"--help"}, []string{"-v value", "--vmodule value", "--logging-format value", "[$KCM_SPLIT_V]", "--version  "}},
	} {
		var out bytes.Buffer
		if code := Run(context.Background(), testSpec(nil), append([]string{"test-controller"}, tc.args...), &out); code != ExitOK {
			t.Errorf("%v: exit %d, output %q", tc.args, code, out.String())
			continue
		}
		for _, want := range tc.want {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%v: output lacks %q:\n%s", tc.args, want, out.String())
			}
		}
	}
}

// Hidden flags stay out of --help.
func TestHelpHidesHiddenFlags(t *testing.T) {
	spec := testSpec(nil)
	spec.Options.(*testOptions).extra = []cli.Flag{newHiddenFlag()}
	var out bytes.Buffer
	if code := Run(context.Background(), spec, []string{"test-controller", "--help"}, &out); code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	if strings.Contains(out.String(), "secret-knob") {
		t.Errorf("--help shows a hidden flag:\n%s", out.String())
	}
}

func newHiddenFlag() *cli.IntFlag {
	return &cli.IntFlag{Name: "secret-knob", Hidden: true, Usage: "not for users"}
}

// The controller's --help mentions the check subcommand and lists none of its flags: they are
// not controller flags.
func TestHelpLeavesOutTheCheck(t *testing.T) {
	var out bytes.Buffer
	if code := Run(context.Background(), testSpec(nil), []string{"test-controller", "--help"}, &out); code != ExitOK {
		t.Fatalf("--help: exit %d", code)
	}
	help := out.String()
	if !strings.Contains(help, "test-controller check [options]") {
		t.Errorf("--help does not mention the check subcommand:\n%s", help)
	}
	for _, f := range []string{check.FlagReadyzURL, check.FlagLease, check.FlagAttempts} {
		if strings.Contains(help, "--"+f+" ") {
			t.Errorf("--help lists the check's --%s as a controller flag:\n%s", f, help)
		}
	}
}

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
