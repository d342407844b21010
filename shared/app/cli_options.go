package app

import (
	"context"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"
)

// CategoryController is the --help category of a controller's own flags.
const CategoryController = "Controller"

// WithOptions returns spec with opts as its Options and a Run that calls run with them: parsing
// fills opts once, through the flags its Flags method binds to its fields, and run gets the
// filled value each term.
func WithOptions[O any, P interface {
	*O
	Options
}](spec Spec, opts O, run func(context.Context, *Runtime, O) error) Spec {
	p := P(&opts)
	spec.Options = p
	spec.Run = func(ctx context.Context, rt *Runtime) error { return run(ctx, rt, *p) }
	return spec
}

// Bound returns the flag --name in category, bound to *dst, with *dst's value as its default:
// the one way a controller declares a flag, so a setting's default, flag and field cannot
// drift apart.
func Bound[T int | float64 | bool | string | time.Duration](category, name string, dst *T, usage string) cli.Flag {
	switch d := any(dst).(type) {
	case *int:
		return &cli.IntFlag{Name: name, Category: category, Value: *d, Destination: d, Usage: usage}
	case *float64:
		return &cli.Float64Flag{Name: name, Category: category, Value: *d, Destination: d, Usage: usage}
	case *bool:
		return &cli.BoolFlag{Name: name, Category: category, Value: *d, Destination: d, Usage: usage}
	case *string:
		return &cli.StringFlag{Name: name, Category: category, Value: *d, Destination: d, Usage: usage}
	case *time.Duration:
		return &cli.DurationFlag{Name: name, Category: category, Value: *d, Destination: d, Usage: usage}
	}
	panic(fmt.Sprintf("app: Bound: flag --%s of type %T", name, dst)) // unreachable: T is one of the above
}

// FirstError returns the first non-nil error: Validate lists its checks in flag order and
// reports the first bad value.
func FirstError(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// AtLeast refuses --flag below lowest.
func AtLeast[N ~int | ~int64 | ~float64](flag string, v, lowest N) error {
	if v < lowest {
		return &FlagError{Flag: flag, Err: fmt.Errorf("%v is less than %v", v, lowest)}
	}
	return nil
}

// AtMost refuses --flag above highest.
func AtMost[N ~int | ~int64 | ~float64](flag string, v, highest N) error {
	if v > highest {
		return &FlagError{Flag: flag, Err: fmt.Errorf("%v is more than %v", v, highest)}
	}
	return nil
}

// Positive refuses a --flag duration of zero or less.
func Positive(flag string, d time.Duration) error {
	if d <= 0 {
		return &FlagError{Flag: flag, Err: fmt.Errorf("%s is not positive", d)}
	}
	return nil
}

// NotNegative refuses a negative --flag duration.
func NotNegative(flag string, d time.Duration) error {
	if d < 0 {
		return &FlagError{Flag: flag, Err: fmt.Errorf("%s is negative", d)}
	}
	return nil
}
