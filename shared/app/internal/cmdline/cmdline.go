// Package cmdline reads the command lines of kcm-split's binaries: their flags and the
// environment (Parse), --help (PrintHelp), the exit codes, and kube-controller-manager's
// --controllers syntax (Enabled), which a binary's own --controllers and the take-over's
// reading of kube-controller-manager's Pods share.
//
// Flags are declared with urfave/cli's types (names, defaults, usage, categories, environment
// variables), but parsed here rather than by cli.App.Run. cli.App renders its help with
// text/template, whose method lookup by name makes the Go linker keep every exported method
// of every type the binary converts to an interface: with client-go's scheme that is all of
// Kubernetes' API types, doubling the binary (48 MB instead of 27 MB for the same program)
// and adding about 10 MiB of resident memory to every controller. Help is printed from
// each flag's own String instead, in the same format.
package cmdline

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"
)

// Exit codes.
const (
	ExitOK      = 0
	ExitFailure = 1 // runtime failure, or a controller that did not stop after a lost Lease
	ExitUsage   = 2 // bad flags or environment
)

// Names of the built-in flags.
const (
	flagHelp    = "help"
	flagVersion = "version"
)

// Parsed is a parsed command line.
type Parsed struct {
	// Ctx tells which flags were given; nil when Help was asked for with -h or -help.
	Ctx     *cli.Context
	Flags   []cli.Flag // without the built-in ones, for help
	Help    bool
	Version bool
}

// Parse applies the environment and then args (without the program name) to flags.
// An error is a usage error.
func Parse(name string, flags []cli.Flag, args []string) (Parsed, error) {
	all := append([]cli.Flag{
		&cli.BoolFlag{Name: flagHelp, Aliases: []string{"h"}, Usage: "show help"},
		// No -v: that is upstream's verbosity flag.
		&cli.BoolFlag{Name: flagVersion, Usage: "print the version"},
	}, flags...)
	set := flag.NewFlagSet(name, flag.ContinueOnError)
	set.SetOutput(io.Discard)
	for _, f := range all {
		// Apply registers the flag and takes its value from its environment variable.
		if err := f.Apply(set); err != nil {
			return Parsed{}, err
		}
	}
	if err := set.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) { // -help, -h
			return Parsed{Help: true, Flags: flags}, nil
		}
		return Parsed{}, err
	}
	c := cli.NewContext(&cli.App{Name: name, Flags: all}, set, nil)
	if c.NArg() > 0 {
		return Parsed{}, fmt.Errorf("unexpected arguments: %v", c.Args().Slice())
	}
	return Parsed{Ctx: c, Flags: flags, Help: c.Bool(flagHelp), Version: c.Bool(flagVersion)}, nil
}

// PrintHelp writes what --help shows: name, usage, version, then the flags by category in
// the order they are declared.
func PrintHelp(w io.Writer, name, usage, version string, flags []cli.Flag) {
	fmt.Fprintf(w, "NAME:\n   %s - %s\n\nUSAGE:\n   %s [options]\n\nVERSION:\n   %s\n\nOPTIONS:\n", name, usage, name, version)
	var order []string
	byCategory := map[string][]cli.Flag{}
	for _, f := range flags {
		category := ""
		if cf, ok := f.(cli.CategorizableFlag); ok {
			if !cf.IsVisible() {
				continue
			}
			category = cf.GetCategory()
		}
		if _, seen := byCategory[category]; !seen {
			order = append(order, category)
		}
		byCategory[category] = append(byCategory[category], f)
	}
	tw := tabwriter.NewWriter(w, 1, 8, 2, ' ', 0)
	for _, category := range order {
		if category != "" {
			fmt.Fprintf(tw, "   %s\n\n", category)
		}
		for _, f := range byCategory[category] {
			fmt.Fprintf(tw, "   %s\n", f)
		}
		fmt.Fprintln(tw)
	}
	fmt.Fprintf(tw, "   --%s, -h\tshow help\n   --%s\tprint the version\n", flagHelp, flagVersion)
	_ = tw.Flush()
}

// Enabled reads the entries of a --controllers value for one controller, name, as
// kube-controller-manager does: the first entry naming it (canonical maps names and aliases
// to canonical names) decides, "-name" turning it off; otherwise "*" turns it on unless it is
// disabled by default.
func Enabled(name string, disabledByDefault bool, entries []string, canonical map[string]string) bool {
	star := false
	for _, e := range entries {
		switch {
		case e == "*":
			star = true
		case strings.HasPrefix(e, "-") && canonical[e[1:]] == name:
			return false
		case canonical[e] == name:
			return true
		}
	}
	return star && !disabledByDefault
}
