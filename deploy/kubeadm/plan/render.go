package plan

import (
	"fmt"
	"io"
	"strings"
)

// commentBlock turns lines into YAML comments, wrapping none (a line is one flag).
func commentBlock(lines ...string) string {
	var b strings.Builder
	for _, l := range lines {
		if l == "" {
			b.WriteString("#\n")
			continue
		}
		b.WriteString("# " + l + "\n")
	}
	return b.String()
}

// byCategory groups outcomes, not carried first (they need a reader's eyes), in the command
// line's order within a group.
func (p *Plan) byCategory(carriedToo bool) []string {
	order := []category{unknownToKCM, noSuch, notChosen, stays, setByChart, carriedAsIs}
	if carriedToo {
		order = append(order, carried)
	}
	var lines []string
	for _, c := range order {
		for _, o := range p.Outcomes {
			if o.Category != c {
				continue
			}
			line := fmt.Sprintf("%s: %s", o.Written, c)
			if o.Why != "" {
				line += ": " + o.Why
			}
			if len(o.To) > 0 {
				line += " -> " + strings.Join(o.To, ", ")
			}
			lines = append(lines, line)
		}
	}
	return lines
}

func (p *Plan) count(match func(outcome) bool) int {
	n := 0
	for _, o := range p.Outcomes {
		if match(o) {
			n++
		}
	}
	return n
}

// ValuesYAML is the chart values, with what was not carried and why as comments.
func (p *Plan) ValuesYAML() (string, error) {
	n, err := p.Values.node()
	if err != nil {
		return "", err
	}
	body, err := encodeYAML(n)
	if err != nil {
		return "", err
	}
	var aliases []string
	for _, r := range p.Binaries {
		aliases = append(aliases, r.Alias)
	}
	head := []string{
		"kcm-split chart values from kube-controller-manager's flags (" + p.Source.What + "), by kcm-split-plan.",
		"They enable " + strings.Join(aliases, ", ") + "; use them with `helm upgrade --install ... -f <this file>`.",
		"Turn the same controllers off in kube-controller-manager through kubeadm's ClusterConfiguration",
		"(kcm-split-plan -o kubeadm), or `kubeadm upgrade` undoes it:",
		"  --controllers=" + p.New.String(),
	}
	if len(p.Notes) > 0 {
		head = append(head, "", "Notes:")
		for _, n := range p.Notes {
			head = append(head, "  "+n)
		}
	}
	tail := []string{fmt.Sprintf("Every flag of kube-controller-manager (%d), carried or not:", len(p.Outcomes))}
	for _, l := range p.byCategory(true) {
		tail = append(tail, "  "+l)
	}
	return commentBlock(head...) + body + commentBlock(tail...), nil
}

// KubeadmYAML is the ClusterConfiguration entry that sets kube-controller-manager's new --controllers.
func (p *Plan) KubeadmYAML() (string, error) {
	// A tree keeps kubeadm's own order of the keys.
	doc := &tree{vals: map[string]*leaf{}, asis: true}
	doc.set("apiVersion", "kubeadm.k8s.io/v1beta4", "")
	doc.set("kind", "ClusterConfiguration", "")
	arg := &tree{vals: map[string]*leaf{}, asis: true}
	arg.set("name", "controllers", "")
	arg.set("value", p.New.String(), "")
	doc.sub("controllerManager").set("extraArgs", []*tree{arg}, "")
	n, err := doc.node()
	if err != nil {
		return "", err
	}
	body, err := encodeYAML(n)
	if err != nil {
		return "", err
	}
	head := commentBlock(
		"kube-controller-manager's new --controllers, in kubeadm's ClusterConfiguration (v1beta4): kubeadm",
		"renders the static Pod from it on `kubeadm upgrade apply` and `kubeadm init phase control-plane",
		"controller-manager`, so an edit of the manifest alone is undone. Merge it into the cluster's",
		"(ConfigMap kubeadm-config in kube-system, key ClusterConfiguration): replace an extraArgs entry",
		"named controllers, keep the others.",
		"Today: --controllers="+p.Old.String(),
	)
	return head + body, nil
}

// Report writes the summary for a reader (stderr): every flag not carried and why, the notes,
// and the new --controllers.
func (p *Plan) Report(w io.Writer) {
	total := len(p.Outcomes)
	inValues := p.count(func(o outcome) bool { return o.Category == carried })
	asIs := p.count(func(o outcome) bool { return o.Category == carriedAsIs })
	fmt.Fprintf(w, "kcm-split-plan: %s: %d flags: %d carried into the values, %d carried implicitly, %d not carried\n",
		p.Source.What, total, inValues, asIs, total-inValues-asIs)
	for _, l := range p.byCategory(false) {
		fmt.Fprintf(w, "  %s\n", l)
	}
	for _, n := range p.Notes {
		fmt.Fprintf(w, "kcm-split-plan: note: %s\n", n)
	}
	fmt.Fprintf(w, "kcm-split-plan: kube-controller-manager --controllers=%s\n", p.New)
}
