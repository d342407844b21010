package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kcm-split/kcm-split/shared/logging"
	"github.com/kcm-split/kcm-split/shared/metrics"
	"github.com/kcm-split/kcm-split/shared/testenv"
)

var env *testenv.Env

// The tests run several binaries in this one process, one often already talking to the apiserver
// while another starts: the process-global sinks a binary sets once (client-go's metrics, klog's
// logger) are set before any of them, or any test client, runs.
func TestMain(m *testing.M) {
	metrics.InstallClientGoSinks()
	lo := logging.Options{Level: "info", Format: "json"}
	if _, l, err := logging.New(lo); err == nil {
		_ = logging.RouteKlog(l, lo)
	}
	testenv.Main(m, &env)
}

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

func httpGet(url string) (int, string, error) { return get(http.DefaultClient, url, "") }

// get GETs url with client, with token as a bearer token if set, and returns the status and
// the body.
func get(client *http.Client, url, token string) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
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
