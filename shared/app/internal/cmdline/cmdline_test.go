package cmdline

import (
	"debug/elf"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

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
