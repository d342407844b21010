// Package apptest checks, in a service's unit tests, that bad flag values are refused the way
// shared/app promises: Validate blames the right flag with an *app.FlagError, and the binary
// exits with app.ExitUsage and a message naming that flag before it connects anywhere.
package apptest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/kcm-split/kcm-split/shared/app"
	"github.com/kcm-split/kcm-split/shared/features"
)

// BadFlag is a command line (and environment) the binary must refuse.
type BadFlag struct {
	// Name names the subtest.
	Name string
	// Args follow the binary's name on the command line.
	Args []string
	// Env is set for the run only (t.Setenv), e.g. {app.EnvVar(FlagX): "-1s"}.
	Env map[string]string
	// WantFlag is the flag the error must name, without dashes.
	WantFlag string
}

// BadFlags runs spec's binary (app.Run, as app.Main would) once per case, in a subtest, and
// checks that it exits with app.ExitUsage and that its stderr names --WantFlag. spec is the
// service's Spec function: every run gets flags of its own, as app.Run changes them in place.
// Cases set environment variables, so BadFlags must not run in a parallel test.
func BadFlags(t *testing.T, spec func() app.Spec, cases []BadFlag) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			t.Helper()
			CheckBadFlag(t, spec(), tc)
		})
	}
}

// CheckBadFlag is one case of BadFlags, reported on t.
func CheckBadFlag(t testing.TB, spec app.Spec, tc BadFlag) {
	t.Helper()
	if tc.WantFlag == "" {
		t.Errorf("case %q names no flag to expect", tc.Name)
		return
	}
	for k, v := range tc.Env {
		t.Setenv(k, v)
	}
	var stderr bytes.Buffer
	code := app.Run(context.Background(), spec, append([]string{spec.ID}, tc.Args...), &stderr)
	if code != app.ExitUsage {
		t.Errorf("%s %v: exit code %d, want %d (usage); stderr: %s", spec.ID, tc.Args, code, app.ExitUsage, stderr.String())
	}
	if !strings.Contains(stderr.String(), "--"+tc.WantFlag) {
		t.Errorf("%s %v: stderr %q does not name --%s", spec.ID, tc.Args, stderr.String(), tc.WantFlag)
	}
}

// WantFlagError checks the error of a Validate function: with flag "" it must be nil,
// otherwise an *app.FlagError (possibly wrapped) for flag.
func WantFlagError(t testing.TB, err error, flag string) {
	t.Helper()
	if msg := flagErrorMismatch(err, flag); msg != "" {
		t.Error(msg)
	}
}

func flagErrorMismatch(err error, flag string) string {
	if flag == "" {
		if err != nil {
			return fmt.Sprintf("Validate = %v, want nil", err)
		}
		return ""
	}
	var fe *app.FlagError
	if !errors.As(err, &fe) || fe.Flag != flag {
		return fmt.Sprintf("Validate = %v, want a FlagError for --%s", err, flag)
	}
	return ""
}

// Validator is a service's Options.
type Validator interface{ Validate() error }

// ValidateCase is an Options value and the flag its Validate must blame ("" for none).
type ValidateCase[O Validator] struct {
	Name     string
	Opts     O
	WantFlag string
}

// CheckSpec checks what every service's Spec must be: its ID and DefaultPort, a Run and
// Options, Options of its own on every call (parsing writes into them, and adds environment
// variables to their flags in place, so two Specs must share neither), and every flag of the
// Options bound to a field (a Destination), so no value is read back by a flag's name.
func CheckSpec(t testing.TB, spec func() app.Spec, id string, port int) {
	t.Helper()
	s := spec()
	if s.ID != id || s.DefaultPort != port || s.Run == nil || s.Options == nil {
		t.Errorf("Spec: ID %q, DefaultPort %d, Run set %v, Options set %v; want %q, %d, both set",
			s.ID, s.DefaultPort, s.Run != nil, s.Options != nil, id, port)
		return
	}
	for _, g := range s.FeatureGates {
		if !features.Known(g) {
			t.Errorf("Spec: feature gate %s is not one of kube-controller-manager's", g)
		}
	}
	again := spec()
	if v := reflect.ValueOf(s.Options); v.Kind() != reflect.Pointer {
		t.Errorf("Spec: Options is a %T, want a pointer its flags can be bound to", s.Options)
	} else if reflect.ValueOf(again.Options).Pointer() == v.Pointer() {
		t.Errorf("two Specs share their Options (%T)", s.Options)
	}
	flags, flagsAgain := s.Options.Flags(), again.Options.Flags()
	if len(flagsAgain) != len(flags) {
		t.Errorf("Spec: %d flags, then %d", len(flags), len(flagsAgain))
		return
	}
	bound := map[uintptr]string{}
	for i, f := range flags {
		if flagsAgain[i] == f {
			t.Errorf("two calls of Flags share the value of flag %v", f.Names())
		}
		d := reflect.ValueOf(f).Elem().FieldByName("Destination")
		if !d.IsValid() || d.IsNil() {
			t.Errorf("flag --%s is bound to no field (no Destination)", f.Names()[0])
			continue
		}
		if other, dup := bound[d.Pointer()]; dup {
			t.Errorf("flags --%s and --%s are bound to the same field", other, f.Names()[0])
		}
		bound[d.Pointer()] = f.Names()[0]
	}
}

// With returns a copy of o changed by f, so that a table states each case as one change to
// the defaults: With(DefaultOptions(), func(o *Options) { o.Workers = 0 }).
func With[O any](o O, f func(*O)) O {
	f(&o)
	return o
}

// Validate checks every case's Validate as WantFlagError does, naming the case in failures.
func Validate[O Validator](t testing.TB, cases []ValidateCase[O]) {
	t.Helper()
	for _, tc := range cases {
		if msg := flagErrorMismatch(tc.Opts.Validate(), tc.WantFlag); msg != "" {
			t.Errorf("%s: %s", tc.Name, msg)
		}
	}
}
