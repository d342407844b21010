package plan

import (
	"bytes"
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"

	endpointscontroller "github.com/kcm-split/kcm-split/services/endpoints"
	"github.com/kcm-split/kcm-split/services/endpoints/endpoints"
	"github.com/kcm-split/kcm-split/services/endpoints/endpointslice"
	"github.com/kcm-split/kcm-split/services/endpoints/mirroring"
	"github.com/kcm-split/kcm-split/services/namespace"
	"github.com/kcm-split/kcm-split/services/nodelifecycle"
	"github.com/kcm-split/kcm-split/services/nodelifecycle/ipam"
	"github.com/kcm-split/kcm-split/services/nodelifecycle/tainteviction"
	"github.com/kcm-split/kcm-split/services/pvbinder"
	"github.com/kcm-split/kcm-split/services/quota"
	"github.com/kcm-split/kcm-split/services/servicelb"
	"github.com/kcm-split/kcm-split/shared/app"
)

// specs are the binaries' own Specs, by chart key: what each really parses. A Spec is good for
// one parse.
var specs = map[string]func() app.Spec{
	"endpoints":     endpointscontroller.Spec,
	"namespace":     namespace.Spec,
	"nodelifecycle": nodelifecycle.Spec,
	"pvbinder":      pvbinder.Spec,
	"quota":         quota.Spec,
	"servicelb":     servicelb.Spec,
}

// kcmNames are the names each binary gives kube-controller-manager's controllers it runs (the
// Controller names its take-over waits on).
var kcmNames = map[string][]string{
	"endpoints":     {endpoints.Name, endpointslice.Name, mirroring.Name},
	"namespace":     {namespace.Name},
	"nodelifecycle": {nodelifecycle.Name, tainteviction.Name, ipam.Name},
	"pvbinder":      {pvbinder.Name},
	"quota":         {quota.Name},
	"servicelb":     {servicelb.ControllerID},
}

// helpFlags are the flags a binary's --help lists.
func helpFlags(t *testing.T, alias string) map[string]bool {
	t.Helper()
	spec := specs[alias]()
	var out bytes.Buffer
	if code := app.Run(context.Background(), spec, []string{spec.ID, "--help"}, &out); code != app.ExitOK {
		t.Fatalf("%s --help: exit %d: %s", spec.ID, code, out.String())
	}
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+--?([a-z0-9-]+)`).FindAllStringSubmatch(out.String(), -1) {
		flags[m[1]] = true
	}
	if len(flags) < 20 {
		t.Fatalf("%s --help lists %d flags: %s", spec.ID, len(flags), out.String())
	}
	return flags
}

// The table of binaries is the binaries' own: names, the controllers they run, budgets.
func TestBinariesAreTheServices(t *testing.T) {
	if len(binaries) != len(specs) {
		t.Fatalf("the plan knows %d binaries, the test %d: add the new one to both", len(binaries), len(specs))
	}
	for _, b := range binaries {
		t.Run(b.Alias, func(t *testing.T) {
			spec := specs[b.Alias]()
			if spec.ID != b.ID {
				t.Errorf("ID %q, the binary's %q", b.ID, spec.ID)
			}
			var replaces []string
			for _, c := range b.Replaces {
				replaces = append(replaces, c.Name)
			}
			if !slices.Equal(replaces, kcmNames[b.Alias]) {
				t.Errorf("replaces %v, the binary runs %v", replaces, kcmNames[b.Alias])
			}
			if got, want := b.DefaultQPS, float64(spec.DefaultQPS); got != want {
				t.Errorf("DefaultQPS %v, the binary's %v", got, want)
			}
			if got, want := b.DefaultBurst, float64(spec.DefaultBurst); got != want {
				t.Errorf("DefaultBurst %v, the binary's %v", got, want)
			}
			if got := helpFlags(t, b.Alias)["controllers"]; got != b.ControllersFlag {
				t.Errorf("ControllersFlag %v, the binary has --controllers: %v", b.ControllersFlag, got)
			}
		})
	}
}

// A binary with --controllers accepts every name and alias the table gives its controllers
// (kube-controller-manager's), and refuses others: the aliases cannot drift.
func TestControllerNamesAndAliasesAreTheBinaries(t *testing.T) {
	// What lets every controller of a binary run (node-ipam-controller allocates only with it).
	runnable := map[string][]string{"nodelifecycle": {"--allocate-node-cidrs", "--cluster-cidr=10.244.0.0/16"}}
	for _, b := range binaries {
		if !b.ControllersFlag {
			continue
		}
		for _, c := range b.Replaces {
			for _, name := range append([]string{c.Name}, c.Aliases...) {
				for _, v := range []string{name, "*,-" + name} {
					if err := app.Parse(specs[b.Alias](), append([]string{"--controllers=" + v}, runnable[b.Alias]...)); err != nil {
						t.Errorf("%s --controllers=%s: %v", b.ID, v, err)
					}
				}
			}
		}
		if err := app.Parse(specs[b.Alias](), []string{"--controllers=not-a-controller"}); err == nil {
			t.Errorf("%s accepts --controllers=not-a-controller: the check above proves nothing", b.ID)
		}
	}
}

func TestChoose(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []string
		all     bool
		wantErr string
	}{
		{in: "all", want: []string{"endpoints", "namespace", "nodelifecycle", "pvbinder", "quota"}, all: true},
		{in: "quota,endpoints", want: []string{"endpoints", "quota"}},
		{in: " servicelb , namespace-controller ", want: []string{"namespace", "servicelb"}},
		{in: "pv-binder-controller,pvbinder", want: []string{"pvbinder"}},
		{in: "servicelb,all", want: []string{"endpoints", "namespace", "nodelifecycle", "pvbinder", "quota", "servicelb"}, all: true},
		{in: "", wantErr: "--controllers is required"},
		{in: ",", wantErr: "names no binary"},
		{in: "endpoints,kube-proxy,x", wantErr: `unknown "kube-proxy", "x"`},
	} {
		got, _, all, err := choose(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("choose(%q): error %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || all != tc.all || !slices.Equal(aliasesOf(got), tc.want) {
			t.Errorf("choose(%q) = %v, %v, %v; want %v, %v", tc.in, aliasesOf(got), all, err, tc.want, tc.all)
		}
	}
}

func TestControllersValue(t *testing.T) {
	ep, _ := binaryByAlias("endpoints")
	nl, _ := binaryByAlias("nodelifecycle")
	ns, _ := binaryByAlias("namespace")
	off := append(append(slices.Clone(ep.Replaces), nl.Replaces...), ns.Replaces...)
	const offList = "-endpoints-controller,-endpointslice-controller,-endpointslice-mirroring-controller," +
		"-node-lifecycle-controller,-taint-eviction-controller,-node-ipam-controller,-namespace-controller"
	for _, tc := range []struct {
		old  string
		runs []string // of off, those the old value runs
		want string
	}{
		// kubeadm's default.
		{old: "*,bootstrapsigner,tokencleaner", runs: names3(off),
			want: "*,bootstrapsigner,tokencleaner," + offList},
		// Entries naming them by alias, on or off, are dropped: the first entry decides, so a
		// kept "endpoint" would turn the controller on again ahead of "-endpoints-controller".
		{old: "endpoint,*,-nodeipam,-namespace",
			runs: []string{"endpoints-controller", "endpointslice-controller", "endpointslice-mirroring-controller", "node-lifecycle-controller", "taint-eviction-controller"},
			want: "*," + offList},
		// No "*": only what is named runs.
		{old: "endpointslice,garbage-collector-controller", runs: []string{"endpointslice-controller"},
			want: "garbage-collector-controller," + offList},
	} {
		old := controllersValue(strings.Split(tc.old, ","))
		var runs []string
		for _, c := range off {
			if old.runs(c) {
				runs = append(runs, c.Name)
			}
		}
		if !slices.Equal(runs, tc.runs) {
			t.Errorf("%s runs %v, want %v", tc.old, runs, tc.runs)
		}
		got := old.without(off)
		if got.String() != tc.want {
			t.Errorf("%s without them = %s, want %s", tc.old, got, tc.want)
		}
		for _, c := range off {
			if got.runs(c) {
				t.Errorf("%s still runs %s", got, c.Name)
			}
		}
		for _, other := range []kcmController{{Name: "garbage-collector-controller"}, {Name: "job-controller", Aliases: []string{"job"}}} {
			if old.runs(other) != got.runs(other) {
				t.Errorf("%s -> %s changes %s", tc.old, got, other.Name)
			}
		}
	}
}

func names3(cs []kcmController) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}
