package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kcm-split/kcm-split/shared/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// testOptions are a test controller's settings: one flag of its own, and any extra flags.
type testOptions struct {
	workers int
	extra   []cli.Flag
}

func (o *testOptions) Flags() []cli.Flag {
	return append([]cli.Flag{&cli.IntFlag{Name: "concurrent-test-syncs", Value: 5, Destination: &o.workers, Usage: "workers"}}, o.extra...)
}

func (o *testOptions) Validate() error {
	if o.workers < 1 {
		return &FlagError{Flag: "concurrent-test-syncs", Err: fmt.Errorf("%d must be at least 1", o.workers)}
	}
	return nil
}

func testSpec(run func(ctx context.Context, rt *Runtime) error) Spec {
	return Spec{
		ID:          "test-controller",
		DefaultPort: 0,
		Options:     &testOptions{},
		Run:         run,
	}
}

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

func httpGet(url string) (int, string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// TestLifecycle runs a whole binary in-process against the real apiserver: it serves health
// and metrics, is not Ready while leading with unsynced caches, becomes Ready once synced,
// reports leadership, and exits 0 on shutdown.
func TestLifecycle(t *testing.T) {
	testenv.Require(t, env)
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	var synced atomic.Bool
	started := make(chan *Runtime, 1)
	spec := testSpec(func(ctx context.Context, rt *Runtime) error {
		rt.SetSynced(synced.Load)
		started <- rt
		<-ctx.Done()
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	var stderr bytes.Buffer
	go func() {
		done <- Run(ctx, spec, []string{"test-controller",
			"--kubeconfig=" + env.Kubeconfig,
			fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", port),
			"--leader-elect-resource-name=lifecycle-test",
			"--leader-elect-retry-period=200ms",
			"--log-level=error",
		}, &stderr)
	}()

	select {
	case rt := <-started:
		if !strings.HasPrefix(rt.Config.UserAgent, "test-controller/") {
			t.Errorf("user agent = %q", rt.Config.UserAgent)
		}
	case code := <-done:
		t.Fatalf("exited early with %d: %s", code, stderr.String())
	case <-time.After(20 * time.Second):
		t.Fatal("never started leading")
	}

	if code, body, err := httpGet(base + "/readyz"); err != nil || code != http.StatusInternalServerError {
		t.Fatalf("leader with unsynced caches: /readyz = %d %q %v, want 500", code, body, err)
	}
	synced.Store(true)
	for _, p := range []string{"/readyz", "/healthz", "/livez"} {
		if code, body, err := httpGet(base + p); err != nil || code != http.StatusOK {
			t.Fatalf("%s = %d %q %v, want 200", p, code, body, err)
		}
	}
	_, metrics, err := httpGet(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`leader_election_master_status{name="lifecycle-test"} 1`, "rest_client_requests_total", "go_goroutines", "process_resident_memory_bytes"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	cancel()
	select {
	case code := <-done:
		if code != ExitOK {
			t.Fatalf("graceful shutdown exit = %d: %s", code, stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("did not exit after cancel")
	}
}

func TestRunErrorExits1(t *testing.T) {
	testenv.Require(t, env)
	spec := testSpec(func(context.Context, *Runtime) error { return errors.New("informers never synced") })
	var stderr bytes.Buffer
	code := Run(context.Background(), spec, []string{"test-controller", "--kubeconfig=" + env.Kubeconfig,
		"--metrics-bind-address=:0", "--leader-elect=false", "--log-level=error"}, &stderr)
	if code != ExitFailure || !strings.Contains(stderr.String(), "informers never synced") {
		t.Fatalf("exit = %d, stderr = %q", code, stderr.String())
	}
}

// A binary's own client budget is what --help shows and what its clients get; the flags,
// from the command line or the environment, still override either half.
func TestOwnClientBudget(t *testing.T) {
	testenv.Require(t, env)
	for _, tc := range []struct {
		name               string
		args               []string
		env                map[string]string
		wantQPS, wantBurst int
	}{
		{name: "own defaults", wantQPS: 200, wantBurst: 400},
		{name: "qps flag", args: []string{"--kube-api-qps=7"}, wantQPS: 7, wantBurst: 400},
		{name: "burst from the environment", env: map[string]string{EnvVar(FlagBurst): "9"}, wantQPS: 200, wantBurst: 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var got *Runtime
			spec := testSpec(func(_ context.Context, rt *Runtime) error { got = rt; return nil })
			spec.DefaultQPS, spec.DefaultBurst = 200, 400
			var stderr bytes.Buffer
			args := append([]string{"test-controller", "--kubeconfig=" + env.Kubeconfig, "--secure-port=0",
				"--leader-elect=false", "--log-level=error"}, tc.args...)
			if code := Run(context.Background(), spec, args, &stderr); code != ExitOK {
				t.Fatalf("exit = %d, stderr = %q", code, stderr.String())
			}
			if got == nil {
				t.Fatal("Run was not called")
			}
			if got.Config.QPS != float32(tc.wantQPS) || got.Config.Burst != tc.wantBurst {
				t.Errorf("client budget = %v/%d, want %d/%d", got.Config.QPS, got.Config.Burst, tc.wantQPS, tc.wantBurst)
			}
		})
	}

	var out bytes.Buffer
	spec := testSpec(nil)
	spec.DefaultQPS, spec.DefaultBurst = 200, 400
	if code := Run(context.Background(), spec, []string{"test-controller", "--help"}, &out); code != ExitOK {
		t.Fatalf("--help exit = %d", code)
	}
	for _, want := range []string{"burst to use while talking with the API server (default: 400)", "QPS to use while talking with the API server (default: 200)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help lacks %q", want)
		}
	}
}
