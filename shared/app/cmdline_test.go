package app

import (
	"bytes"
	"context"
	"debug/elf"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

func TestHelpAndVersion(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"-h"}, []string{"NAME:\n   test-controller - ", "--concurrent-test-syncs value", "(default: 5)", "   Client\n"}},
		{[]string{"--leader-elect=false", "--help"}, []string{"--kube-api-qps value"}},
		{[]string{"--version"}, []string{"test-controller version " + Version + "\n"}},
	} {
		var out bytes.Buffer
		if code := Run(context.Background(), testSpec(nil), append([]string{"test-controller"}, tc.args...), &out); code != ExitOK {
			t.Errorf("%v: exit %d, output %q", tc.args, code, out.String())
			continue
		}
		for _, want := range tc.want {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%v: output lacks %q:\n%s", tc.args, want, out.String())
			}
		}
	}
}

// Hidden flags stay out of --help.
func TestHelpHidesHiddenFlags(t *testing.T) {
	spec := testSpec(nil)
	spec.Flags = append(spec.Flags, newHiddenFlag())
	var out bytes.Buffer
	if code := Run(context.Background(), spec, []string{"test-controller", "--help"}, &out); code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	if strings.Contains(out.String(), "secret-knob") {
		t.Errorf("--help shows a hidden flag:\n%s", out.String())
	}
}

// Every binary must stay free of reflection that looks methods up by a computed name
// (text/template's field evaluation is the usual way in): the linker then keeps every exported
// method of every type converted to an interface, which with client-go's scheme is all of
// Kubernetes' API types, and the binary doubles. This builds a minimal controller the way
// the Makefile does and reads its symbol table.
func TestNoReflectMethodLookup(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	bin := filepath.Join(t.TempDir(), "linkcheck")
	build := exec.Command("go", "build", "-trimpath", "-o", bin, "./testdata/linkcheck")
	build.Env = append(build.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	var sawScheme bool
	for _, s := range syms {
		if strings.HasPrefix(s.Name, "text/template.(*state).evalField") || strings.HasPrefix(s.Name, "html/template.") {
			t.Errorf("the binary links %s: method lookup by name keeps every exported method", s.Name)
		}
		if strings.HasPrefix(s.Name, "k8s.io/client-go/kubernetes/scheme.") {
			sawScheme = true
		}
	}
	if !sawScheme {
		t.Error("no client-go scheme symbol: the check is not looking at a real controller binary")
	}
}

func newHiddenFlag() *cli.IntFlag {
	return &cli.IntFlag{Name: "secret-knob", Hidden: true, Usage: "not for users"}
}
