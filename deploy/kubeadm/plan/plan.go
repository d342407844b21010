package plan

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/kcm-split/kcm-split/shared/features"
	"k8s.io/component-base/featuregate"
)

// category says what became of a flag.
type category string

const (
	carried      category = "carried"
	carriedAsIs  category = "carried implicitly"
	notChosen    category = "not carried: for a binary not chosen"
	setByChart   category = "not carried: set by the chart"
	stays        category = "not carried: not ours"
	noSuch       category = "not carried: no equivalent"
	unknownToKCM category = "not carried: unknown"
)

// outcome is what became of one flag (or, for --feature-gates, part of one).
type outcome struct {
	Written  string // as kube-controller-manager read it: --name=value
	Category category
	// To are the values' keys it went to (carried).
	To []string
	// Why explains it: how it is carried implicitly, or why it is not carried.
	Why string
}

func (o outcome) isCarried() bool { return o.Category == carried || o.Category == carriedAsIs }

// running is a chosen binary in the plan, with the kube-controller-manager controllers it takes over.
type running struct {
	binary
	// Runs are those of Replaces kube-controller-manager's --controllers turns on.
	Runs []kcmController
	// Works are those of Runs that do something (their OnlyWith flag is on).
	Works []kcmController
}

// shares is how many of kube-controller-manager's per-controller clients the binary's one
// client stands for.
func (r running) shares() float64 {
	if n := len(r.Runs); n > 0 {
		return float64(n)
	}
	return float64(len(r.Replaces))
}

// Plan is the result: the chart values, the new --controllers, and what became of every flag.
type Plan struct {
	Source source
	// Binaries are the binaries the values enable.
	Binaries []running
	// Old and New are kube-controller-manager's --controllers today and after the move.
	Old, New controllersValue
	Values   *tree
	Outcomes []outcome
	// Notes are what the operator should know beyond the flags (stderr and comments).
	Notes []string
}

// Options choose what the plan covers.
type Options struct {
	// Controllers is --controllers: chart keys or binary names, "all" for every binary but servicelb.
	Controllers string
	// TakeOver adds takeOverFromKCM to the values (the binaries wait until kube-controller-manager's
	// Pods turn the controllers off).
	TakeOver bool
	// DespiteLeaderMigration plans even though kube-controller-manager runs with
	// --enable-leader-migration (refused otherwise).
	DespiteLeaderMigration bool
	// DespiteLeaseNamespace plans a take-over even though kube-controller-manager's Lease is in
	// another namespace than its Pods (refused otherwise).
	DespiteLeaseNamespace bool
}

// Flags that override a refusal of makePlan.
const (
	flagDespiteLeaderMigration = "despite-leader-migration"
	flagDespiteLeaseNamespace  = "despite-lease-namespace"
)

// refuse returns why the plan is refused for src, unless opts overrides it: a
// kube-controller-manager in a Leader Migration, whose lock the binaries do not take part in,
// or (for a take-over) one whose Lease is where the take-over cannot read it.
func refuse(src source, opts Options) error {
	if g, ok := src.lookup("enable-leader-migration"); ok && g.Value == "true" && !opts.DespiteLeaderMigration {
		return badInput("kube-controller-manager runs with %s: it takes part in a Leader Migration, which neither the binaries "+
			"nor the take-over do, so its controllers and theirs could act at once; finish or undo that migration first, "+
			"or pass --%s to plan anyway", g, flagDespiteLeaderMigration)
	}
	if g, ok := src.lookup("leader-elect-resource-namespace"); ok && opts.TakeOver && g.Value != src.Namespace && !opts.DespiteLeaseNamespace {
		return badInput("kube-controller-manager runs with %s, but its Pods are in %s: the take-over reads the Pods and the Lease "+
			"in one namespace, finds no Lease there and goes by the Pods' --controllers alone, without knowing whether a "+
			"kube-controller-manager still leads; pass --%s to plan that take-over anyway (or --take-over=false)",
			g, src.Namespace, flagDespiteLeaseNamespace)
	}
	return nil
}

// makePlan plans the move of the chosen binaries' controllers out of the kube-controller-manager
// that src describes.
func makePlan(src source, opts Options) (*Plan, error) {
	chosen, named, all, err := choose(opts.Controllers)
	if err != nil {
		return nil, inputError{err}
	}
	if err := refuse(src, opts); err != nil {
		return nil, err
	}
	p := &Plan{Source: src, Values: newTree(), Old: controllersValue{"*"}}
	if g, ok := src.lookup("controllers"); ok {
		p.Old = nil
		for e := range strings.SplitSeq(g.Value, ",") {
			if e = strings.TrimSpace(e); e != "" {
				p.Old = append(p.Old, e)
			}
		}
	}
	var off []kcmController
	for _, b := range chosen {
		r := running{binary: b}
		for _, c := range b.Replaces {
			if !p.Old.runs(c) {
				continue
			}
			r.Runs = append(r.Runs, c)
			if g, ok := src.lookup(c.OnlyWith); c.OnlyWith == "" || ok && g.Value == "true" {
				r.Works = append(r.Works, c)
			}
		}
		if len(r.Works) == 0 {
			why := fmt.Sprintf("kube-controller-manager runs none of its controllers (%s): --controllers=%s", names(b.Replaces), p.Old)
			if len(r.Runs) > 0 {
				why += fmt.Sprintf(" turns on %s only, which does nothing without --%s", names(r.Runs), r.Runs[0].OnlyWith)
			}
			if !named[b.Alias] {
				p.Notes = append(p.Notes, fmt.Sprintf("%s left out of all: %s", b.Alias, why))
				continue
			}
			p.Notes = append(p.Notes, fmt.Sprintf("%s: %s; enabled as asked, it starts work nothing did before", b.Alias, why))
		}
		p.Binaries = append(p.Binaries, r)
		off = append(off, b.Replaces...)
	}
	if all {
		for _, b := range binaries {
			if !b.InAll && !named[b.Alias] {
				p.Notes = append(p.Notes, fmt.Sprintf("%s left out of all: kube-controller-manager v1.36's %s does nothing without a cloud provider, "+
					"so %s is a new LoadBalancer implementation rather than a replacement, and would contend with a cloud-controller-manager's "+
					"or MetalLB's for the same Services; name it in --controllers to add it", b.Alias, names(b.Replaces), b.ID))
			}
		}
	}
	if len(p.Binaries) == 0 {
		return nil, badInput("kube-controller-manager runs none of the controllers of %s (--controllers=%s): nothing to move", strings.Join(aliasesOf(chosen), ", "), p.Old)
	}
	p.New = p.Old.without(off)

	ctrls := p.Values.sub("controllers")
	ctrls.asis = true // the chart's order
	for _, r := range p.Binaries {
		c := ctrls.sub(r.Alias)
		c.set("enabled", true, "")
		// The binary runs what kube-controller-manager ran; a controller that would do nothing
		// anyway needs no naming (and the binary refuses a --controllers whose every controller
		// would do nothing).
		if r.ControllersFlag && len(r.Works) > 0 && len(r.Runs) < len(r.Replaces) {
			c.sub("flags").set("controllers", names(r.Runs), fmt.Sprintf("kube-controller-manager runs only these of %s's: --controllers=%s", r.ID, p.Old))
		}
	}
	if opts.TakeOver {
		to := p.Values.sub("takeOverFromKCM")
		to.set("enabled", true, "")
		to.set("namespace", src.Namespace, "kube-controller-manager's Pods")
		to.set("podSelector", src.Selector, "")
		to.set("leaseName", kcmName, "kube-controller-manager's default --leader-elect-resource-name")
	}
	for _, g := range src.Flags {
		p.Outcomes = append(p.Outcomes, p.carry(g, opts)...)
	}
	return p, nil
}

func names(cs []kcmController) string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return strings.Join(out, ",")
}

// targets are the running binaries a flag matters to.
func (p *Plan) targets(f kcmFlag) []running {
	var out []running
	for _, r := range p.Binaries {
		if len(f.For) == 0 || slices.Contains(f.For, r.Alias) {
			out = append(out, r)
		}
	}
	return out
}

// carry puts one flag into the values, or says why not.
// Over 80 lines: one short case per way of carrying a flag, the table's meaning in one place.
func (p *Plan) carry(g given, opts Options) []outcome {
	o := outcome{Written: g.String()}
	if len(g.Written) > 1 && g.Flag.Kind != kList && g.Flag.Kind != kGates {
		p.Notes = append(p.Notes, fmt.Sprintf("--%s is given %d times (%s): kube-controller-manager uses the last, and so does the plan", g.Name, len(g.Written), strings.Join(g.Written, ", ")))
	}
	if !g.Known {
		o.Category, o.Why = unknownToKCM, "kube-controller-manager v1.36 has no such flag"
		return []outcome{o}
	}
	f := g.Flag
	targets := p.targets(f)
	if len(f.For) > 0 && len(targets) == 0 {
		o.Category, o.Why = notChosen, fmt.Sprintf("used by %s only, which the plan does not enable", strings.Join(f.For, ", "))
		return []outcome{o}
	}
	if len(f.Accept) > 0 && !slices.Contains(f.Accept, g.Value) {
		o.Category, o.Why = noSuch, f.Else
		return []outcome{o}
	}
	from := g.String()
	switch f.How {
	case toFlag:
		v := typed(f.Kind, g.Value)
		for _, r := range targets {
			p.Values.sub("controllers").sub(r.Alias).sub("flags").set(f.To, v, from)
			o.To = append(o.To, fmt.Sprintf("controllers.%s.flags.%s", r.Alias, f.To))
		}
	case toExtraArg:
		for _, r := range targets {
			p.Values.sub("controllers").sub(r.Alias).add("extraArgs", "--"+f.To+"="+g.Value, from)
			o.To = append(o.To, fmt.Sprintf("controllers.%s.extraArgs", r.Alias))
		}
	case toQPS, toBurst:
		p.carryBudget(g, f.How == toQPS, targets, &o)
	case toLogLevel:
		if n, _ := strconv.Atoi(g.Value); n < 0 || n > 10 {
			o.Category, o.Why = noSuch, "the binaries' verbosity goes from 0 to 10"
			return []outcome{o}
		}
		for _, r := range targets {
			p.Values.sub("controllers").sub(r.Alias).set("logLevel", g.Value, from)
			o.To = append(o.To, fmt.Sprintf("controllers.%s.logLevel", r.Alias))
		}
	case toLogFormat:
		format := map[string]string{"text": "console", "json": "json"}[g.Value]
		p.Values.sub("defaults").set("logFormat", format, from)
		o.To = append(o.To, "defaults.logFormat")
	case toLeaderElection:
		p.Values.sub("defaults").sub("leaderElection").set(f.To, g.Value, from)
		o.To = append(o.To, "defaults.leaderElection."+f.To)
	case toKCMLease:
		if !opts.TakeOver {
			o.Category, o.Why = notChosen, "tells the take-over where kube-controller-manager's Lease is; --take-over=false leaves it out"
			return []outcome{o}
		}
		if f.To == "namespace" && g.Value != p.Source.Namespace {
			o.Category, o.Why = noSuch, fmt.Sprintf("the take-over reads kube-controller-manager's Pods and Lease in one namespace "+
				"(takeOverFromKCM.namespace: %s, its Pods'); it then finds no Lease there and goes by the Pods' --controllers alone", p.Source.Namespace)
			return []outcome{o}
		}
		p.Values.sub("takeOverFromKCM").set(f.To, g.Value, from)
		o.To = append(o.To, "takeOverFromKCM."+f.To)
	case toGates:
		return p.carryGates(g, targets)
	case toControllers:
		o.Category, o.Why = carriedAsIs, "read: kube-controller-manager's new --controllers and each binary's own come from it"
		return []outcome{o}
	case implicit:
		o.Category, o.Why = carriedAsIs, f.Why
		return []outcome{o}
	case byChart:
		o.Category, o.Why = setByChart, f.Why
		return []outcome{o}
	case notOurs:
		verb := " stays"
		if strings.Contains(f.Owner, " and ") {
			verb = " stay"
		}
		o.Category, o.Why = stays, f.Owner+verb+" in kube-controller-manager"
		if f.Why != "" {
			o.Why += "; " + f.Why
		}
		return []outcome{o}
	case noEquivalent:
		o.Category, o.Why = noSuch, f.Why
		return []outcome{o}
	}
	if o.Category == "" {
		o.Category = carried
		if f.Note != "" && (f.NoteWhen == "" || g.Value == f.NoteWhen) && !slices.Contains(p.Notes, f.Note) {
			p.Notes = append(p.Notes, f.Note)
		}
	}
	return []outcome{o}
}

// carryBudget carries --kube-api-qps or --kube-api-burst: kube-controller-manager gives every
// controller a client of its own with that budget, each binary has one client for its
// controllers, so the binary gets one share per controller (binary.QPSFactor).
func (p *Plan) carryBudget(g given, qps bool, targets []running, o *outcome) {
	v, _ := strconv.ParseFloat(g.Value, 64)
	for _, r := range targets {
		factor, key, def := r.QPSFactor, "kubeAPIQPS", r.defaultQPS()
		if !qps {
			factor, key, def = r.BurstFactor, "kubeAPIBurst", r.defaultBurst()
		}
		if factor == 0 {
			factor = r.shares()
		}
		total := v * factor
		var value any = total
		if !qps || total == math.Trunc(total) {
			value = int64(math.Round(total))
			total = math.Round(total)
		}
		p.Values.sub("controllers").sub(r.Alias).set(key, value, fmt.Sprintf("%s x %s: kube-controller-manager's budget per controller", g.String(), strconv.FormatFloat(factor, 'f', -1, 64)))
		o.To = append(o.To, fmt.Sprintf("controllers.%s.%s", r.Alias, key))
		if total < def {
			p.Notes = append(p.Notes, fmt.Sprintf("controllers.%s.%s: %s is below %s's own default, %s, chosen for its work (see its --help); leave the key out to keep that default", r.Alias, key,
				strconv.FormatFloat(total, 'f', -1, 64), r.ID, strconv.FormatFloat(def, 'f', -1, 64)))
		}
	}
}

// carryGates carries the gates of the kube component (written "Gate=v" or "kube:Gate=v") that the
// binaries know (shared/features, which their --feature-gates checks) to each binary's
// --feature-gates. A gate they do not know would make every binary refuse to start: such gates,
// and gates of other components, are named as not carried, with the reason.
func (p *Plan) carryGates(g given, targets []running) []outcome {
	var kube, unknown, other []string
	for pair := range strings.SplitSeq(g.Value, ",") {
		if pair = strings.TrimSpace(pair); pair == "" {
			continue
		}
		name, _, _ := strings.Cut(pair, "=")
		component, gate, scoped := strings.Cut(name, ":")
		if !scoped {
			gate = name
		}
		switch {
		case scoped && component != "kube":
			other = append(other, pair)
		case !features.Known(featuregate.Feature(gate)) && gate != "AllAlpha" && gate != "AllBeta":
			unknown = append(unknown, strings.TrimPrefix(pair, "kube:"))
		default:
			kube = append(kube, strings.TrimPrefix(pair, "kube:"))
		}
	}
	var out []outcome
	if len(kube) > 0 {
		o := outcome{Written: "--feature-gates=" + strings.Join(kube, ","), Category: carried}
		for _, r := range targets {
			p.Values.sub("controllers").sub(r.Alias).add("extraArgs", "--feature-gates="+strings.Join(kube, ","), g.String())
			o.To = append(o.To, fmt.Sprintf("controllers.%s.extraArgs", r.Alias))
		}
		out = append(out, o)
	}
	if len(unknown) > 0 {
		out = append(out, outcome{Written: "--feature-gates=" + strings.Join(unknown, ","), Category: noSuch,
			Why: fmt.Sprintf("gates the binaries do not know (no gate of kube-controller-manager %s): "+
				"their --feature-gates refuses an unknown gate, so carrying these would keep every binary from starting", features.Version)})
	}
	if len(other) > 0 {
		out = append(out, outcome{Written: "--feature-gates=" + strings.Join(other, ","), Category: noSuch,
			Why: "gates of components other than kube; the binaries have kube-controller-manager's (kube) gates only"})
	}
	if len(out) == 0 {
		out = append(out, outcome{Written: g.String(), Category: carriedAsIs, Why: "sets no gate"})
	}
	return out
}

// typed converts a checked value to what the chart's schema expects of the key.
func typed(k kind, v string) any {
	switch k {
	case kBool:
		b, _ := strconv.ParseBool(v)
		return b
	case kInt:
		n, _ := strconv.ParseInt(v, 10, 64)
		return n
	case kFloat:
		f, _ := strconv.ParseFloat(v, 64)
		if f == math.Trunc(f) {
			return int64(f)
		}
		return f
	}
	return v
}
