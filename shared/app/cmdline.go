package app

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/urfave/cli/v2"
)

// Flags are declared with urfave/cli's types (names, defaults, usage, categories, environment
// variables), but parsed here rather than by cli.App.Run. cli.App renders its help with
// text/template, whose method lookup by name makes the Go linker keep every exported method
// of every type the binary converts to an interface: with client-go's scheme that is all of
// Kubernetes' API types, doubling the binary (48 MB instead of 27 MB for the same program)
// and adding about 10 MiB of resident memory to every controller. Help is printed from
// each flag's own String instead, in the same format.

// Names of the built-in flags.
const (
	flagHelp    = "help"
	flagVersion = "version"
)

// cmdline is the parsed command line.
type cmdline struct {
	ctx     *cli.Context
	flags   []cli.Flag // without the built-in ones, for help
	help    bool
	version bool
}

// parseCmdline applies the environment and then args (without the program name) to flags.
// An error is a usage error.
func parseCmdline(name string, flags []cli.Flag, args []string) (cmdline, error) {
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
			return cmdline{}, err
		}
	}
	if err := set.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) { // -help, -h
			return cmdline{help: true, flags: flags}, nil
		}
		return cmdline{}, err
	}
	c := cli.NewContext(&cli.App{Name: name, Flags: all}, set, nil)
	if c.NArg() > 0 {
		return cmdline{}, fmt.Errorf("unexpected arguments: %v", c.Args().Slice())
	}
	return cmdline{ctx: c, flags: flags, help: c.Bool(flagHelp), version: c.Bool(flagVersion)}, nil
}

// printHelp writes what --help shows: name, usage, version, then the flags by category in
// the order they are declared.
func printHelp(w io.Writer, spec Spec, flags []cli.Flag) {
	fmt.Fprintf(w, "NAME:\n   %s - %s\n\nUSAGE:\n   %s [options]\n\nVERSION:\n   %s\n\nOPTIONS:\n", spec.ID, spec.Usage, spec.ID, Version)
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
