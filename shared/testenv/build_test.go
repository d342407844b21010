package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// fatalRecorder is a testing.TB whose Fatal ends only the goroutine calling it, as the real
// one does, and records the message, so that a helper's fatal failure can be checked.
type fatalRecorder struct {
	testing.TB
	fatal string
}

func (r *fatalRecorder) Fatal(args ...any) { r.fatal = fmt.Sprint(args...); runtime.Goexit() }
func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// recordFatal calls f on a recorder in a goroutine of its own and returns the fatal message, if any.
func recordFatal(t *testing.T, f func(testing.TB)) string {
	r := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r.fatal
}

func runHello(t *testing.T, bin string) {
	t.Helper()
	out, err := exec.Command(bin).Output()
	if err != nil || strings.TrimSpace(string(out)) != "hello" {
		t.Fatalf("%s: %q, %v; want hello", bin, out, err)
	}
}

func TestBuildOnceBuildsOnce(t *testing.T) {
	first := BuildOnce(t, "./testdata/cmd/hello")
	runHello(t, first)
	st, err := os.Stat(first)
	if err != nil {
		t.Fatal(err)
	}
	again := BuildOnce(t, "./testdata/cmd/hello")
	st2, err := os.Stat(again)
	if err != nil {
		t.Fatal(err)
	}
	if again != first || !st2.ModTime().Equal(st.ModTime()) {
		t.Fatalf("second BuildOnce: %s (%s), want %s untouched (%s)", again, st2.ModTime(), first, st.ModTime())
	}
	if filepath.Base(first) != "hello" {
		t.Errorf("binary %s, want it named after its package", first)
	}
	// Build compiles every time, to a path of its own.
	if b := Build(t, "./testdata/cmd/hello"); b == first {
		t.Errorf("Build returned BuildOnce's binary %s", b)
	}
}

func TestBinaryBuildsCmdIDInDir(t *testing.T) {
	b := Binary{ID: "hello", Dir: "testdata"}
	p := b.Path(t)
	runHello(t, p)
	if again := b.Path(t); again != p {
		t.Fatalf("second Path = %s, want %s", again, p)
	}
	if b.Lease() != "hello" || b.UserAgentPrefix() != "hello/" {
		t.Errorf("Lease %q, user agent prefix %q", b.Lease(), b.UserAgentPrefix())
	}
}

func TestBuildOnceFailsEveryCallerOfABrokenPackage(t *testing.T) {
	msg := recordFatal(t, func(tb testing.TB) { BuildOnce(tb, "./testdata/cmd/broken") })
	if !strings.Contains(msg, "undefinedOnPurpose") {
		t.Fatalf("first call: fatal %q, want the compiler's message", msg)
	}
	msg = recordFatal(t, func(tb testing.TB) { BuildOnce(tb, "./testdata/cmd/broken") })
	if !strings.Contains(msg, "failed earlier") || !strings.Contains(msg, "undefinedOnPurpose") {
		t.Fatalf("second call: fatal %q, want the earlier failure repeated", msg)
	}
}

// A controller started with StartLeading holds the Lease named after its ID, and its
// requests carry the user agent prefix Binary promises.
func TestStartLeading(t *testing.T) {
	Require(t, env)
	b := Binary{ID: "testenv-leader", Dir: "testdata"}
	c := env.StartLeading(t, b, "leader")
	if !c.IsLeader(b.Lease()) {
		t.Fatalf("not leading %s after StartLeading", b.Lease())
	}
	lease, err := env.Client(t).CoordinationV1().Leases("kube-system").Get(context.Background(), b.Lease(), metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil {
		t.Fatalf("Lease kube-system/%s: %v, %+v", b.Lease(), err, lease)
	}
	writes, err := env.Writes(ByUserAgentPrefix(b.UserAgentPrefix(), "leases"))
	if err != nil {
		t.Fatal(err)
	}
	if len(writes) == 0 {
		t.Fatalf("no Lease write with user agent %s*", b.UserAgentPrefix())
	}
}
