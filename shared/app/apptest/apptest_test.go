package apptest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/kcm-split/kcm-split/shared/app"
)

// recorder is a testing.TB that collects failures instead of failing the test, so that the
// helpers' own failures can be checked. Everything else (Setenv, Helper, TempDir) is the real
// test's.
type recorder struct {
	testing.TB
	failures []string
}

func (r *recorder) Error(args ...any) { r.failures = append(r.failures, fmt.Sprint(args...)) }
func (r *recorder) Errorf(format string, args ...any) {
	r.failures = append(r.failures, fmt.Sprintf(format, args...))
}

// want fails t unless the recorded failures are exactly one per substring, in order.
func (r *recorder) want(t *testing.T, substrs ...string) {
	t.Helper()
	if len(r.failures) != len(substrs) {
		t.Fatalf("failures = %q, want %d naming %q", r.failures, len(substrs), substrs)
	}
	for i, s := range substrs {
		if !strings.Contains(r.failures[i], s) {
			t.Errorf("failure %d = %q, want it to mention %q", i, r.failures[i], s)
		}
	}
}

const flagWorkers = "concurrent-test-syncs"

// workerOptions are a controller's settings with one flag; validate decides what their
// Validate says about it.
type workerOptions struct {
	workers  int
	validate func(workers int) error
}

func (o *workerOptions) Flags() []cli.Flag {
	return []cli.Flag{&cli.IntFlag{Name: flagWorkers, Value: 5, Destination: &o.workers}}
}

func (o *workerOptions) Validate() error { return o.validate(o.workers) }

// flagsOf are Options whose flags a test chooses.
type flagsOf struct {
	n     int
	flags func(*flagsOf) []cli.Flag
}

func (o *flagsOf) Flags() []cli.Flag { return o.flags(o) }
func (o *flagsOf) Validate() error   { return nil }

// spec is a controller with one flag; validate decides what its Validate says about it.
func spec(validate func(workers int) error) func() app.Spec {
	return func() app.Spec {
		return app.Spec{
			ID:      "apptest-controller",
			Options: &workerOptions{validate: validate},
			Run:     func(context.Context, *app.Runtime) error { return errors.New("Run was reached") },
		}
	}
}

// right blames --concurrent-test-syncs below 1.
var right = spec(func(w int) error {
	if w < 1 {
		return &app.FlagError{Flag: flagWorkers, Err: fmt.Errorf("%d is less than 1", w)}
	}
	return nil
})

var zeroWorkers = BadFlag{Name: "zero workers", Args: []string{"--" + flagWorkers + "=0"}, WantFlag: flagWorkers}

func TestBadFlagsPassOnARightSpec(t *testing.T) {
	BadFlags(t, right, []BadFlag{
		zeroWorkers,
		{Name: "from the environment", Env: map[string]string{app.EnvVar(flagWorkers): "-1"}, WantFlag: flagWorkers},
		// A bad common flag is refused by shared/app before Validate.
		{Name: "common flag", Args: []string{"--kube-api-qps=-1"}, WantFlag: app.FlagQPS},
	})
}

func TestCheckBadFlagFailsWhenValidateAcceptsTheValue(t *testing.T) {
	// With Validate accepting everything the binary gets as far as Run: give it a
	// kubeconfig that parses and no Lease to wait for, so that it exits 1 from Run rather
	// than 2 for the missing in-cluster configuration.
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n" +
		"users: [{name: u, user: {token: x}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n"
	if err := os.WriteFile(kubeconfig, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	accepting := spec(func(int) error { return nil })
	r := &recorder{TB: t}
	CheckBadFlag(r, accepting(), BadFlag{
		Name:     "accepted",
		Args:     []string{"--" + flagWorkers + "=0", "--kubeconfig=" + kubeconfig, "--leader-elect=false", "--secure-port=0"},
		WantFlag: flagWorkers,
	})
	r.want(t, "exit code 1, want 2", "does not name --"+flagWorkers)
}

func TestCheckBadFlagFailsWhenValidateBlamesAnotherFlag(t *testing.T) {
	wrongFlag := spec(func(w int) error {
		if w < 1 {
			return &app.FlagError{Flag: "some-other-flag", Err: errors.New("bad")}
		}
		return nil
	})
	r := &recorder{TB: t}
	CheckBadFlag(r, wrongFlag(), zeroWorkers)
	r.want(t, "does not name --"+flagWorkers)
}

func TestCheckBadFlagSetsTheEnvironment(t *testing.T) {
	// The same value from the environment must be refused; a spec that ignores it is not.
	r := &recorder{TB: t}
	CheckBadFlag(r, right(), BadFlag{Name: "env", Env: map[string]string{app.EnvVar(flagWorkers): "0"}, WantFlag: flagWorkers})
	r.want(t)
	if got := os.Getenv(app.EnvVar(flagWorkers)); got != "0" {
		t.Fatalf("%s = %q during the test, want the case's value", app.EnvVar(flagWorkers), got)
	}
}

func TestCheckBadFlagRefusesACaseWithoutAFlag(t *testing.T) {
	r := &recorder{TB: t}
	CheckBadFlag(r, right(), BadFlag{Name: "no flag", Args: []string{"--" + flagWorkers + "=0"}})
	r.want(t, "names no flag")
}

func TestWantFlagError(t *testing.T) {
	blame := &app.FlagError{Flag: flagWorkers, Err: errors.New("bad")}
	for _, tc := range []struct {
		name string
		err  error
		flag string
		fail string // "" when WantFlagError must pass
	}{
		{name: "nil, none wanted", err: nil, flag: ""},
		{name: "the flag", err: blame, flag: flagWorkers},
		{name: "the flag, wrapped", err: fmt.Errorf("options: %w", blame), flag: flagWorkers},
		{name: "nil, one wanted", err: nil, flag: flagWorkers, fail: "want a FlagError for --" + flagWorkers},
		{name: "another flag", err: blame, flag: "other", fail: "want a FlagError for --other"},
		{name: "a plain error", err: errors.New(flagWorkers + " is bad"), flag: flagWorkers, fail: "want a FlagError"},
		{name: "an error, none wanted", err: blame, flag: "", fail: "want nil"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorder{TB: t}
			WantFlagError(r, tc.err, tc.flag)
			if tc.fail == "" {
				r.want(t)
			} else {
				r.want(t, tc.fail)
			}
		})
	}
}

// options is a service's Options whose Validate is wrong: it never blames anything.
type options struct{ workers int }

func (o options) Validate() error { return nil }

// strictOptions blames the workers flag below 1.
type strictOptions struct{ workers int }

func (o strictOptions) Validate() error {
	if o.workers < 1 {
		return &app.FlagError{Flag: flagWorkers, Err: errors.New("less than 1")}
	}
	return nil
}

func TestCheckSpec(t *testing.T) {
	CheckSpec(t, right, "apptest-controller", 0)

	r := &recorder{TB: t}
	CheckSpec(r, right, "other-controller", 1)
	r.want(t, `want "other-controller", 1`)

	shared := right()
	r = &recorder{TB: t}
	CheckSpec(r, func() app.Spec { return shared }, "apptest-controller", 0)
	r.want(t, "two Specs share their Options")

	// A flag whose value is read back by name is bound to no field.
	r = &recorder{TB: t}
	CheckSpec(r, func() app.Spec {
		s := right()
		s.Options = &flagsOf{flags: func(*flagsOf) []cli.Flag { return []cli.Flag{&cli.IntFlag{Name: flagWorkers}} }}
		return s
	}, "apptest-controller", 0)
	r.want(t, "flag --"+flagWorkers+" is bound to no field")

	// Two flags filling one field: the second would silently overwrite the first.
	r = &recorder{TB: t}
	CheckSpec(r, func() app.Spec {
		s := right()
		s.Options = &flagsOf{flags: func(o *flagsOf) []cli.Flag {
			return []cli.Flag{&cli.IntFlag{Name: "a", Destination: &o.n}, &cli.IntFlag{Name: "b", Destination: &o.n}}
		}}
		return s
	}, "apptest-controller", 0)
	r.want(t, "flags --a and --b are bound to the same field")

	// Flags must be new values on every call.
	var n int
	one := &cli.IntFlag{Name: flagWorkers, Destination: &n}
	r = &recorder{TB: t}
	CheckSpec(r, func() app.Spec {
		s := right()
		s.Options = &flagsOf{flags: func(*flagsOf) []cli.Flag { return []cli.Flag{one} }}
		return s
	}, "apptest-controller", 0)
	r.want(t, "share the value of flag ["+flagWorkers+"]")

	r = &recorder{TB: t}
	CheckSpec(r, func() app.Spec { s := right(); s.Run = nil; return s }, "apptest-controller", 0)
	r.want(t, "Run set false")
}

func TestWithChangesACopy(t *testing.T) {
	defaults := strictOptions{workers: 5}
	changed := With(defaults, func(o *strictOptions) { o.workers = 0 })
	if changed.workers != 0 || defaults.workers != 5 {
		t.Fatalf("With: changed %+v, original %+v; want 0 and 5", changed, defaults)
	}
}

func TestValidate(t *testing.T) {
	Validate(t, []ValidateCase[strictOptions]{
		{Name: "fine", Opts: strictOptions{workers: 1}},
		{Name: "no workers", Opts: strictOptions{}, WantFlag: flagWorkers},
	})

	r := &recorder{TB: t}
	Validate(r, []ValidateCase[options]{
		{Name: "fine", Opts: options{workers: 1}},
		{Name: "no workers", Opts: options{}, WantFlag: flagWorkers},
	})
	r.want(t, "no workers: Validate = <nil>, want a FlagError for --"+flagWorkers)

	r = &recorder{TB: t}
	Validate(r, []ValidateCase[strictOptions]{{Name: "wrongly expected to pass", Opts: strictOptions{}}})
	r.want(t, "wrongly expected to pass: Validate = invalid value for --"+flagWorkers)
}
