package benchkit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/kcm-split/kcm-split/shared/testenv"
)

// Side is one side of a comparison: a controller binary and how to run it.
type Side struct {
	// Name heads the side's column, names its sub-benchmark and prefixes its progress lines.
	Name string
	// UserAgent is the prefix of the user agent its writes carry in the audit log.
	UserAgent string
	// Binary returns the executable; an error means it cannot run here (the side is skipped).
	Binary func(testing.TB) (string, error)
	// Args returns the command line against kubeconfig, with extra flags at the end.
	Args func(kubeconfig string, extra ...string) ([]string, error)
}

// Label is the side's name: the sub-benchmark name RunSides gives it.
func (s Side) Label() string { return s.Name }

// Ours is a kcm-split controller: the main package pkg built as it ships, run with OursArgs
// and flags. Its user agent is name + "/".
func Ours(name, pkg string, flags ...string) Side {
	return Side{
		Name:      name,
		UserAgent: name + "/",
		Binary:    func(tb testing.TB) (string, error) { return BuildShipped(tb, pkg), nil },
		Args: func(kubeconfig string, extra ...string) ([]string, error) {
			args, _, err := OursArgs(kubeconfig, append(flags[:len(flags):len(flags)], extra...)...)
			return args, err
		},
	}
}

// UpstreamSide is upstream kube-controller-manager from bin/ running only controllers
// (upstream's names, comma separated), with UpstreamArgs and flags.
func UpstreamSide(controllers string, flags ...string) Side {
	return Side{
		Name:      Upstream,
		UserAgent: UpstreamUserAgent,
		Binary:    UpstreamKCM,
		Args: func(kubeconfig string, extra ...string) ([]string, error) {
			return UpstreamArgs(kubeconfig, controllers, append(flags[:len(flags):len(flags)], extra...)...), nil
		},
	}
}

// Executable returns the side's binary, skipping tb when it cannot run here (upstream's is
// missing). Call it before starting a control plane, so a skip is quick.
func (s Side) Executable(tb testing.TB) string {
	tb.Helper()
	bin, err := s.Binary(tb)
	if err != nil {
		tb.Skipf("%s cannot run: %v", s.Name, err)
	}
	return bin
}

// Begin starts one run of the side: its executable (skipping tb, before any control plane
// starts, when it cannot run here), a fresh control plane (ControlPlane), and the side's
// progress logger, which has logged how long the control plane took to come up.
func (s Side) Begin(tb testing.TB) (bin string, env *testenv.Env, logf func(format string, args ...any)) {
	tb.Helper()
	logf = Progress(s.Name)
	bin = s.Executable(tb)
	start := time.Now()
	env = ControlPlane(tb)
	logf("control plane up in %s", time.Since(start).Round(time.Millisecond))
	return bin, env, logf
}

// Start runs bin (from Executable) against kubeconfig, extra flags last.
func (s Side) Start(tb testing.TB, bin, kubeconfig string, extra ...string) *Process {
	tb.Helper()
	args, err := s.Args(kubeconfig, extra...)
	if err != nil {
		tb.Fatal(err)
	}
	return Start(tb, s.Name, bin, args...)
}

// Build compiles the main package pkg (an import path) into dir as `make build` and the
// Dockerfile ship it: static (CGO_ENABLED=0), -trimpath, stripped (-s -w). Upstream's
// kube-controller-manager in bin/ is built the same way, so RSS compares like with like.
func Build(pkg, dir string) (string, error) {
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building %s: %w", pkg, err)
	}
	return out, nil
}

// BuildShipped is Build into tb's temporary directory (removed when tb ends), failing tb on a
// build error: our side must build, unlike upstream's, which may be absent.
func BuildShipped(tb testing.TB, pkg string) string {
	tb.Helper()
	out, err := Build(pkg, tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// UpstreamKCM returns bin/kube-controller-manager (or $KCM_SPLIT_BIN_DIR's), or an error that
// names `make tools` when it is missing: benchmarks then skip upstream's side.
func UpstreamKCM(testing.TB) (string, error) {
	dir, err := testenv.FindBinDir()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, Upstream)
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("%s not found: run `make tools`", bin)
	}
	return bin, nil
}

// UpstreamArgs is the command line of kube-controller-manager running only controllers
// (upstream's names, comma separated) against kubeconfig: no leader election, the kubeconfig's
// identity for every controller (so its writes carry UpstreamUserAgent), no secure serving
// (nothing scrapes it, and it would want certificates), --v=1. extra comes after those, so it
// may override any of them (the last value of a flag wins).
func UpstreamArgs(kubeconfig, controllers string, extra ...string) []string {
	args := []string{
		"--kubeconfig=" + kubeconfig,
		"--controllers=" + controllers,
		"--leader-elect=false",
		"--use-service-account-credentials=false",
		"--secure-port=0",
	}
	args = append(args, extra...)
	return append(args, "--v=1")
}

// OursArgs is the command line of a kcm-split controller against kubeconfig: no leader
// election, no secure serving (its port is fixed per binary, and a `make up` running beside
// the benchmark would hold it; upstream's is off too), plain HTTP metrics and health on a free
// loopback port (whose base URL it returns, e.g. http://127.0.0.1:34567), --log-level=info,
// then extra.
func OursArgs(kubeconfig string, extra ...string) (args []string, url string, err error) {
	port, err := testenv.FreePort()
	if err != nil {
		return nil, "", err
	}
	args = []string{
		"--kubeconfig=" + kubeconfig,
		"--leader-elect=false",
		"--secure-port=0",
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", port),
		"--log-level=info",
	}
	return append(args, extra...), fmt.Sprintf("http://127.0.0.1:%d", port), nil
}
