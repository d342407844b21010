package plan

import (
	"fmt"
	"slices"
	"strings"
)

// kcmController is one of kube-controller-manager's controllers: its name in --controllers and
// the older names (aliases) --controllers accepts for it, as kube-controller-manager v1.36 declares them.
type kcmController struct {
	Name    string
	Aliases []string
	// OnlyWith is a boolean flag without which the controller, though on, does nothing: in
	// kube-controller-manager as in the binary (node-ipam-controller: --allocate-node-cidrs).
	OnlyWith string
}

// binary is a kcm-split binary that can take kube-controller-manager's place for some of its
// controllers.
type binary struct {
	// Alias is the chart's key, controllers.<Alias>, and what --controllers names.
	Alias string
	// ID is the binary's name (its image, its Lease).
	ID string
	// Replaces are the kube-controller-manager controllers it runs, in its own order.
	Replaces []kcmController
	// ControllersFlag: the binary has its own --controllers (the chart's flags.controllers) to
	// run some of Replaces only.
	ControllersFlag bool
	// InAll: "all" chooses it. service-lb-controller does nothing in kube-controller-manager
	// v1.36 (no in-tree cloud provider is left): the binary is a new LoadBalancer implementation,
	// not a replacement, and it would contend with a cloud-controller-manager's or MetalLB's
	// for the same Services. It runs only when named.
	InAll bool
	// QPSFactor and BurstFactor turn kube-controller-manager's --kube-api-qps and --kube-api-burst
	// into this binary's: kube-controller-manager gives each controller a client of its own with
	// that budget (the namespace controller's raised x20 and x100), and this binary's one client
	// serves all of its controllers. 0 means one share per controller the binary runs.
	QPSFactor, BurstFactor float64
	// DefaultQPS and DefaultBurst are the binary's own --kube-api-qps and --kube-api-burst
	// defaults; 0 means client-go's 20 and 30.
	DefaultQPS, DefaultBurst float64
}

func (b binary) defaultQPS() float64 {
	if b.DefaultQPS == 0 {
		return 20
	}
	return b.DefaultQPS
}

func (b binary) defaultBurst() float64 {
	if b.DefaultBurst == 0 {
		return 30
	}
	return b.DefaultBurst
}

// binaries are every binary the plan knows, in the chart's order.
var binaries = []binary{
	{
		Alias: "endpoints", ID: "endpoints-controller", ControllersFlag: true, InAll: true, DefaultQPS: 60, DefaultBurst: 90,
		Replaces: []kcmController{
			{Name: "endpoints-controller", Aliases: []string{"endpoint"}},
			{Name: "endpointslice-controller", Aliases: []string{"endpointslice"}},
			{Name: "endpointslice-mirroring-controller", Aliases: []string{"endpointslicemirroring"}},
		},
	},
	{
		Alias: "namespace", ID: "namespace-controller", InAll: true, QPSFactor: 20, BurstFactor: 100, DefaultQPS: 400, DefaultBurst: 3000,
		Replaces: []kcmController{{Name: "namespace-controller", Aliases: []string{"namespace"}}},
	},
	{
		Alias: "nodelifecycle", ID: "nodelifecycle-controller", ControllersFlag: true, InAll: true, DefaultQPS: 60, DefaultBurst: 90,
		Replaces: []kcmController{
			{Name: "node-lifecycle-controller", Aliases: []string{"nodelifecycle"}},
			{Name: "taint-eviction-controller"},
			{Name: "node-ipam-controller", Aliases: []string{"nodeipam"}, OnlyWith: "allocate-node-cidrs"},
		},
	},
	{
		Alias: "pvbinder", ID: "pv-binder-controller", InAll: true, QPSFactor: 1, BurstFactor: 1, DefaultQPS: 200, DefaultBurst: 400,
		Replaces: []kcmController{{Name: "persistentvolume-binder-controller", Aliases: []string{"persistentvolume-binder"}}},
	},
	{
		Alias: "quota", ID: "quota-controller", InAll: true, QPSFactor: 1, BurstFactor: 1,
		Replaces: []kcmController{{Name: "resourcequota-controller", Aliases: []string{"resourcequota"}}},
	},
	{
		Alias: "servicelb", ID: "service-lb-controller", QPSFactor: 1, BurstFactor: 1, DefaultQPS: 100, DefaultBurst: 200,
		Replaces: []kcmController{{Name: "service-lb-controller", Aliases: []string{"service"}}},
	},
}

// binaryByAlias finds a binary by its chart key or its binary name.
func binaryByAlias(name string) (binary, bool) {
	for _, b := range binaries {
		if b.Alias == name || b.ID == name {
			return b, true
		}
	}
	return binary{}, false
}

// aliasesOf lists the chart keys of the binaries, for messages.
func aliasesOf(bs []binary) []string {
	out := make([]string, 0, len(bs))
	for _, b := range bs {
		out = append(out, b.Alias)
	}
	return out
}

// choose reads --controllers: a comma-separated list of chart keys or binary names, "all"
// standing for every binary InAll. It returns the chosen binaries in the table's order, and
// which of them were named rather than brought by "all".
func choose(value string) ([]binary, map[string]bool, bool, error) {
	if strings.TrimSpace(value) == "" {
		return nil, nil, false, fmt.Errorf("--controllers is required: all, or some of %s", strings.Join(aliasesOf(binaries), ", "))
	}
	chosen, named := map[string]bool{}, map[string]bool{}
	all := false
	var unknown []string
	for name := range strings.SplitSeq(value, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if name == "all" {
			all = true
			for _, b := range binaries {
				chosen[b.Alias] = chosen[b.Alias] || b.InAll
			}
			continue
		}
		b, ok := binaryByAlias(name)
		if !ok {
			unknown = append(unknown, fmt.Sprintf("%q", name))
			continue
		}
		chosen[b.Alias], named[b.Alias] = true, true
	}
	if len(unknown) > 0 {
		return nil, nil, false, fmt.Errorf("--controllers: unknown %s (known: all, %s)", strings.Join(unknown, ", "), strings.Join(aliasesOf(binaries), ", "))
	}
	var out []binary
	for _, b := range binaries {
		if chosen[b.Alias] {
			out = append(out, b)
		}
	}
	if len(out) == 0 {
		return nil, nil, false, fmt.Errorf("--controllers %q names no binary", value)
	}
	return out, named, all, nil
}

// controllersValue is kube-controller-manager's reading of --controllers: entries, "*" for
// every controller on by default, "name" or an alias to turn one on, "-name" to turn it off;
// the first entry naming a controller decides.
type controllersValue []string

// runs reports whether kube-controller-manager runs c under these entries. None of the
// controllers kcm-split replaces is off by default.
func (v controllersValue) runs(c kcmController) bool {
	star := false
	for _, e := range v {
		name, off := strings.CutPrefix(e, "-")
		switch {
		case e == "*":
			star = true
		case name == c.Name || slices.Contains(c.Aliases, name):
			return !off
		}
	}
	return star
}

// without turns the controllers off: every entry naming one of them (by name or alias, on or
// off) is dropped, and "-name" for each is appended, so the value reads the same for every
// other controller and unambiguously turns these off.
func (v controllersValue) without(cs []kcmController) controllersValue {
	var out controllersValue
	for _, e := range v {
		name := strings.TrimPrefix(e, "-")
		if !slices.ContainsFunc(cs, func(c kcmController) bool { return name == c.Name || slices.Contains(c.Aliases, name) }) {
			out = append(out, e)
		}
	}
	for _, c := range cs {
		out = append(out, "-"+c.Name)
	}
	return out
}

func (v controllersValue) String() string { return strings.Join(v, ",") }
