package testenv

import (
	"fmt"
	"testing"
)

// fatalTB records the failure MustEnv reports instead of ending the test.
type fatalTB struct {
	testing.TB
	failed string
}

func (*fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) { f.failed = fmt.Sprintf(format, args...) }

func TestMustEnv(t *testing.T) {
	const name = "KCM_SPLIT_TESTENV_MUSTENV"
	t.Setenv(name, "value")
	var f fatalTB
	if got := MustEnv(&f, name, "make x"); got != "value" || f.failed != "" {
		t.Errorf("set: %q, failure %q; want value and no failure", got, f.failed)
	}
	t.Setenv(name, "")
	if MustEnv(&f, name, "make x"); f.failed != name+" is not set (make x sets it)" {
		t.Errorf("unset: failure %q, want it named with what sets it", f.failed)
	}
}
