package app

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/urfave/cli/v2"
)

// boundOptions declares one flag of each kind Bound knows.
type boundOptions struct {
	n     int
	rate  float64
	on    bool
	name  string
	every time.Duration
}

func (o *boundOptions) Flags() []cli.Flag {
	return []cli.Flag{
		Bound(CategoryController, "n", &o.n, ""),
		Bound(CategoryController, "rate", &o.rate, ""),
		Bound(CategoryController, "on", &o.on, ""),
		Bound(CategoryController, "name", &o.name, ""),
		Bound(CategoryController, "every", &o.every, ""),
	}
}

func (o *boundOptions) Validate() error {
	return FirstError(AtLeast("n", o.n, 1), AtLeast("rate", o.rate, 0), NotNegative("every", o.every))
}

// A bound flag's default is its field's value; the command line and the environment reach
// the field; Run gets the filled options.
func TestWithOptionsAndBound(t *testing.T) {
	defaults := boundOptions{n: 3, rate: 0.5, on: true, name: "a", every: time.Second}
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want boundOptions
	}{
		{name: "defaults", want: defaults},
		{name: "flags", args: []string{"--n=7", "--rate=2.5", "--on=false", "--name=b", "--every=1m"},
			want: boundOptions{n: 7, rate: 2.5, on: false, name: "b", every: time.Minute}},
		{name: "environment", env: map[string]string{"KCM_SPLIT_N": "9", "KCM_SPLIT_EVERY": "2s"},
			want: boundOptions{n: 9, rate: 0.5, on: true, name: "a", every: 2 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var got boundOptions
			spec := WithOptions(Spec{ID: "test-controller"}, defaults, func(_ context.Context, _ *Runtime, o boundOptions) error {
				got = o
				return nil
			})
			if err := Parse(spec, tc.args); err != nil {
				t.Fatal(err)
			}
			if err := spec.Run(context.Background(), nil); err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("Run got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestChecks(t *testing.T) {
	for _, tc := range []struct {
		err  error
		flag string // "" for none
	}{
		{AtLeast("n", 1, 1), ""},
		{AtLeast("n", 0, 1), "n"},
		{AtLeast("d", 999*time.Millisecond, time.Second), "d"},
		{AtLeast("r", -0.1, 0), "r"},
		{Positive("p", time.Nanosecond), ""},
		{Positive("p", 0), "p"},
		{NotNegative("z", 0), ""},
		{NotNegative("z", -time.Second), "z"},
		{FirstError(nil, AtLeast("a", 0, 1), AtLeast("b", 0, 1)), "a"},
		{FirstError(nil, nil), ""},
	} {
		var fe *FlagError
		switch {
		case tc.flag == "" && tc.err != nil:
			t.Errorf("%v, want nil", tc.err)
		case tc.flag != "" && (!errors.As(tc.err, &fe) || fe.Flag != tc.flag):
			t.Errorf("%v, want a FlagError for --%s", tc.err, tc.flag)
		}
	}
}
