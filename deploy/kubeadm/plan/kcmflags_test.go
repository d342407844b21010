package plan

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/kcm-split/kcm-split/shared/testenv"
)

// repoRoot is the directory holding go.work above the test's directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.work above the test's directory")
		}
		dir = parent
	}
}

// tool is bin/<name>, or the test is skipped without it.
func tool(t *testing.T, name string) string {
	t.Helper()
	dir, err := testenv.FindBinDir()
	if err != nil {
		t.Skip(err)
	}
	p := filepath.Join(dir, name)
	if _, err := os.Stat(p); err != nil {
		t.Skipf("%s not built (make tools): %v", p, err)
	}
	return p
}

// The table holds every flag of kube-controller-manager v1.36, and only those, each with the
// kind its --help gives it: a flag added upstream, or a wrong kind (which would read
// "--flag value" wrong), fails here.
func TestFlagTableIsKubeControllerManagers(t *testing.T) {
	kcm := tool(t, kcmName)
	out, _ := exec.Command(kcm, "--help").CombinedOutput()
	// "      --name type   usage", "  -v, --v Level   usage"; a boolean has no type.
	re := regexp.MustCompile(`(?m)^\s+(?:-[a-z], )?--([a-z0-9-]+)(?: ([A-Za-z0-9=,.\[\]]+))?\s{2,}`)
	help := map[string]string{}
	for _, m := range re.FindAllStringSubmatch(string(out), -1) {
		help[m[1]] = m[2]
	}
	if len(help) < 100 {
		t.Fatalf("read %d flags from %s --help:\n%s", len(help), kcm, out)
	}
	kinds := map[string]kind{
		"": kBool, "version[=true]": kBool, "string": kString, "strings": kList, "duration": kDuration,
		"int32": kInt, "int": kInt, "Level": kInt, "float32": kFloat, "float": kFloat,
		"colonSeparatedMultimapStringString": kGates, "ip": kString,
		"namedCertKey": kString, "int32Slice": kString, "stringToString": kString, "quantity": kString, "pattern=N,...": kString,
	}
	for name, typ := range help {
		f, ok := lookupFlag(name)
		if !ok {
			t.Errorf("--%s (%s) is missing from the table", name, typ)
			continue
		}
		want, known := kinds[typ]
		if !known {
			t.Errorf("--%s: --help's type %q is new to this test", name, typ)
		} else if f.Kind != want {
			t.Errorf("--%s: kind %d, --help says %q (%d)", name, f.Kind, typ, want)
		}
	}
	for _, f := range kcmFlags {
		if _, ok := help[f.Name]; !ok {
			t.Errorf("--%s is in the table, not in %s --help", f.Name, kcm)
		}
	}
}

// Each entry says where its value goes, or why it goes nowhere.
func TestFlagTableEntries(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range kcmFlags {
		if seen[f.Name] {
			t.Errorf("--%s twice", f.Name)
		}
		seen[f.Name] = true
		switch f.How {
		case toFlag, toExtraArg, toLeaderElection, toKCMLease:
			if f.To == "" {
				t.Errorf("--%s: carried to no key", f.Name)
			}
		case implicit, byChart, noEquivalent:
			if f.Why == "" {
				t.Errorf("--%s: no reason", f.Name)
			}
		case notOurs:
			if f.Owner == "" {
				t.Errorf("--%s: not ours, but whose?", f.Name)
			}
		}
		if len(f.Accept) > 0 && f.Else == "" {
			t.Errorf("--%s: values other than %v are not carried, for no reason", f.Name, f.Accept)
		}
		for _, a := range f.For {
			if _, ok := binaryByAlias(a); !ok {
				t.Errorf("--%s: for unknown binary %q", f.Name, a)
			}
		}
	}
}

// Every flag the table carries to a binary is one that binary has (its --help), under the
// chart key the chart really has (values.schema.json) with the type the schema wants.
func TestCarriedFlagsAreTheBinariesAndTheCharts(t *testing.T) {
	var schema struct {
		Properties struct {
			Controllers struct {
				Properties map[string]struct {
					AllOf []struct {
						Properties struct {
							Flags struct {
								Properties map[string]struct {
									Type any `json:"type"`
								} `json:"properties"`
							} `json:"flags"`
						} `json:"properties"`
					} `json:"allOf"`
				} `json:"properties"`
			} `json:"controllers"`
		} `json:"properties"`
	}
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "charts", "kcm-split", "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &schema); err != nil {
		t.Fatal(err)
	}
	schemaType := map[kind]string{kBool: "boolean", kInt: "integer", kFloat: "number", kDuration: "string", kString: "string"}
	checked := 0
	for _, bin := range binaries {
		flags := helpFlags(t, bin.Alias)
		chartFlags := map[string]string{}
		for _, part := range schema.Properties.Controllers.Properties[bin.Alias].AllOf {
			for name, p := range part.Properties.Flags.Properties {
				chartFlags[name], _ = p.Type.(string)
			}
		}
		if len(chartFlags) == 0 {
			t.Fatalf("values.schema.json: no flags for controllers.%s", bin.Alias)
		}
		for _, f := range kcmFlags {
			if len(f.For) > 0 && !slices.Contains(f.For, bin.Alias) {
				continue
			}
			var target string
			switch f.How {
			case toFlag, toExtraArg:
				target = f.To
			case toGates:
				target = "feature-gates"
			case toQPS:
				target = "kube-api-qps"
			case toBurst:
				target = "kube-api-burst"
			case toLogLevel:
				target = "log-level"
			default:
				continue
			}
			checked++
			if !flags[target] {
				t.Errorf("--%s is carried to %s's --%s, which %s --help does not list", f.Name, bin.ID, target, bin.ID)
			}
			if f.How != toFlag {
				continue
			}
			if typ, ok := chartFlags[f.To]; !ok {
				t.Errorf("--%s is carried to controllers.%s.flags.%s, which values.schema.json does not have", f.Name, bin.Alias, f.To)
			} else if typ != schemaType[f.Kind] {
				t.Errorf("controllers.%s.flags.%s: the schema's type is %q, the plan writes a %q", bin.Alias, f.To, typ, schemaType[f.Kind])
			}
		}
	}
	if checked < 40 {
		t.Errorf("checked %d carried flags; the table is not what this test thinks", checked)
	}
}

// Flags the table says no binary has are indeed absent from every binary, so a binary that
// gains one makes the table carry it.
func TestNotCarriedFlagsAreNotTheBinaries(t *testing.T) {
	all := map[string]bool{}
	for _, b := range binaries {
		for f := range helpFlags(t, b.Alias) {
			all[f] = true
		}
	}
	for _, f := range kcmFlags {
		if f.How != noEquivalent || strings.HasPrefix(f.Name, "leader-migration") || f.Name == "enable-leader-migration" || f.Name == "help" || f.Name == "version" {
			continue
		}
		if all[f.Name] {
			t.Errorf("--%s is not carried for want of an equivalent, but a binary has --%s: carry it", f.Name, f.Name)
		}
	}
}
