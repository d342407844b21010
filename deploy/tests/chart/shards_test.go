package chart

// Render checks of controllers.<alias>.shards (issue 35): one shard is today's manifests, N
// shards are N Deployments and budgets with the binary's --shards/--shard-index, selectors
// that never overlap (two layouts run side by side during a change of N), and a Role naming
// exactly the binary's Lease names plus the unfiltered list/watch the layout fence needs.

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// shardedAliases are the controllers whose binaries take --shards.
var shardedAliases = []string{"endpoints", "quota"}

func allOn(v *Values) []string {
	var out []string
	for _, a := range v.Aliases() {
		out = append(out, "--set", fmt.Sprintf("controllers.%s.enabled=true", a))
	}
	return out
}

// leaseRules splits a controller's Role's Lease rules into the one naming Leases (its names)
// and whether an unnamed list/watch rule is there; create stays unnamed as before.
func leaseRules(t *testing.T, r *rbacv1.Role) (named []string, namedVerbs []string, listWatchAll bool) {
	t.Helper()
	for _, rule := range r.Rules {
		if !slices.Contains(rule.Resources, "leases") {
			continue
		}
		switch {
		case len(rule.ResourceNames) > 0:
			if named != nil {
				t.Fatalf("Role %s: two named Lease rules", r.Name)
			}
			named, namedVerbs = rule.ResourceNames, rule.Verbs
		case slices.Equal(rule.Verbs, []string{"create"}):
		case slices.Equal(rule.Verbs, []string{"list", "watch"}):
			listWatchAll = true
		default:
			t.Errorf("Role %s: unexpected Lease rule %+v", r.Name, rule)
		}
	}
	return named, namedVerbs, listWatchAll
}

func roleOf(t *testing.T, objs []Object, name string) *rbacv1.Role {
	t.Helper()
	for _, o := range objs {
		if o.Kind == "Role" && o.Name == name && o.Namespace == ns {
			return o.Typed.(*rbacv1.Role)
		}
	}
	t.Fatalf("no Role %s in %s", name, ns)
	return nil
}

// One shard (the default, or shards=1 given) renders nothing of sharding: no layout label,
// no --shards, every name as before, the Role naming the one Lease, no unfiltered Lease read.
// (That the default output is byte for byte the chart's before sharding was checked with
// sha256sum of `helm template` on six value sets when the value was added.)
func TestShardsOneIsUnsharded(t *testing.T) {
	c, v := chart(t)
	def, err := c.Template("kcm-split", ns, allOn(v)...)
	if err != nil {
		t.Fatal(err)
	}
	args := allOn(v)
	for _, a := range shardedAliases {
		args = append(args, "--set", "controllers."+a+".shards=1", "--set", "controllers."+a+".shardLayoutFence=false")
	}
	explicit, err := c.Template("kcm-split", ns, args...)
	if err != nil {
		t.Fatal(err)
	}
	if string(def) != string(explicit) {
		t.Fatal("shards=1 and shardLayoutFence=false given render differently from the defaults")
	}
	for _, s := range []string{"kcm-split.io/shard", "--shards", "--shard-index", "-shard-"} {
		if strings.Contains(string(def), s) {
			t.Errorf("the default render contains %q", s)
		}
	}
	objs, err := Decode(def)
	if err != nil {
		t.Fatal(err)
	}
	for _, alias := range v.Aliases() {
		cv := v.Controllers[alias]
		name := "kcm-split-" + cv.Binary
		named, verbs, all := leaseRules(t, roleOf(t, objs, name))
		if !slices.Equal(named, []string{cv.Binary}) || !slices.Equal(verbs, []string{"get", "update", "list", "watch"}) || all {
			t.Errorf("%s: Lease rules named %v verbs %v unfiltered list/watch %t; want [%s], get/update/list/watch, no unfiltered read", alias, named, verbs, all, cv.Binary)
		}
	}
	if n := len(byKind(objs, "Deployment")); n != len(v.Aliases()) {
		t.Errorf("%d Deployments, want one per controller (%d)", n, len(v.Aliases()))
	}
}

// shardedRender renders endpoints with 3 shards and quota with 2, 3 replicas each (so every
// shard gets a budget), every other controller on.
func shardedRender(t *testing.T, c *Chart, v *Values) []Object {
	t.Helper()
	return render(t, c, "kcm-split", ns, append(allOn(v),
		"--set", "controllers.endpoints.shards=3", "--set", "controllers.quota.shards=2",
		"--set", "controllers.endpoints.replicas=3", "--set", "controllers.quota.replicas=3",
		"--set", "defaults.podAntiAffinity=hard", "--set", "networkPolicy.enabled=true")...)
}

// Over 80 lines: the checks of one sharded render: per sharded controller, then across every shard's Pod labels gathered on the way.
func TestShardsRender(t *testing.T) {
	c, v := chart(t)
	objs := shardedRender(t, c, v)
	deps := map[string]*appsv1.Deployment{}
	for _, o := range byKind(objs, "Deployment") {
		deps[o.Name] = o.Typed.(*appsv1.Deployment)
	}
	pdbs := map[string]*policyv1.PodDisruptionBudget{}
	for _, o := range byKind(objs, "PodDisruptionBudget") {
		pdbs[o.Name] = o.Typed.(*policyv1.PodDisruptionBudget)
	}
	var podLabels []labels.Set // every shard's Pod labels, for the overlap check
	for alias, n := range map[string]int{"endpoints": 3, "quota": 2} {
		cv := v.Controllers[alias]
		base := "kcm-split-" + cv.Binary
		if _, ok := deps[base]; ok {
			t.Errorf("%s: the unsharded Deployment %s is still rendered", alias, base)
		}
		var wantLeases []string
		for i := 0; i < n; i++ {
			name := fmt.Sprintf("%s-shard-%d-of-%d", base, i, n)
			wantLeases = append(wantLeases, fmt.Sprintf("%s-shard-%d-of-%d", cv.Binary, i, n))
			d, ok := deps[name]
			if !ok {
				t.Errorf("%s: no Deployment %s (have %v)", alias, name, SortedKeys(deps))
				continue
			}
			pod := d.Spec.Template
			if pod.Spec.ServiceAccountName != base {
				t.Errorf("%s: serviceAccountName %q, want the controller's %s (one identity, one Role, for every shard)", name, pod.Spec.ServiceAccountName, base)
			}
			if *d.Spec.Replicas != 3 {
				t.Errorf("%s: %d replicas, want 3 (replicas is per shard)", name, *d.Spec.Replicas)
			}
			wantLabels := map[string]string{"kcm-split.io/shards": fmt.Sprint(n), "kcm-split.io/shard-index": fmt.Sprint(i), "app.kubernetes.io/component": cv.Binary}
			for what, l := range map[string]map[string]string{"Pod": pod.Labels, "selector": d.Spec.Selector.MatchLabels, "Deployment": d.Labels} {
				if !isSubset(wantLabels, l) {
					t.Errorf("%s: %s labels %v lack %v", name, what, l, wantLabels)
				}
			}
			podLabels = append(podLabels, pod.Labels)
			args := pod.Spec.Containers[0].Args
			for _, want := range []string{fmt.Sprintf("--shards=%d", n), fmt.Sprintf("--shard-index=%d", i), "--leader-elect-resource-name=" + cv.Binary} {
				if k := countOf(args, want); k != 1 {
					t.Errorf("%s: %s %d times in %v, want once", name, want, k, args)
				}
			}
			// Anti-affinity keeps one shard's replicas apart; shards may share a node.
			aa := pod.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution
			if len(aa) != 1 || !equalMaps(aa[0].LabelSelector.MatchLabels, d.Spec.Selector.MatchLabels) {
				t.Errorf("%s: anti-affinity %+v, want the shard's selector %v", name, aa, d.Spec.Selector.MatchLabels)
			}
			p, ok := pdbs[name]
			if !ok {
				t.Errorf("%s: no PodDisruptionBudget %s", alias, name)
			} else if !equalMaps(p.Spec.Selector.MatchLabels, d.Spec.Selector.MatchLabels) {
				t.Errorf("PDB %s selects %v, its Deployment %v", name, p.Spec.Selector.MatchLabels, d.Spec.Selector.MatchLabels)
			}
		}
		named, verbs, all := leaseRules(t, roleOf(t, objs, base))
		if !slices.Equal(named, wantLeases) || !slices.Equal(verbs, []string{"get", "update", "list", "watch"}) {
			t.Errorf("%s: named Lease rule %v %v, want exactly %v with get/update/list/watch", alias, named, verbs, wantLeases)
		}
		if !all {
			t.Errorf("%s: no unfiltered list/watch of Leases: the layout fence cannot see another layout's Leases", alias)
		}
		// One Service and one NetworkPolicy for the controller select every shard's Pods.
		for _, o := range byKind(objs, "NetworkPolicy") {
			if o.Name != base {
				continue
			}
			pol := o.Typed.(*networkingv1.NetworkPolicy)
			for i := 0; i < n; i++ {
				d := deps[fmt.Sprintf("%s-shard-%d-of-%d", base, i, n)]
				if d != nil && !labels.SelectorFromSet(pol.Spec.PodSelector.MatchLabels).Matches(labels.Set(d.Spec.Template.Labels)) {
					t.Errorf("NetworkPolicy %s does not select shard %d's Pods", base, i)
				}
			}
		}
		svcSel := serviceSelector(t, objs, base)
		for i := 0; i < n; i++ {
			d := deps[fmt.Sprintf("%s-shard-%d-of-%d", base, i, n)]
			if d != nil && !labels.SelectorFromSet(svcSel).Matches(labels.Set(d.Spec.Template.Labels)) {
				t.Errorf("Service %s (%v) does not select shard %d's Pods", base, svcSel, i)
			}
		}
	}
	// No shard's Deployment selects another shard's Pods.
	for _, o := range byKind(objs, "Deployment") {
		d := o.Typed.(*appsv1.Deployment)
		sel := labels.SelectorFromSet(d.Spec.Selector.MatchLabels)
		matched := 0
		for _, l := range podLabels {
			if sel.Matches(l) {
				matched++
			}
		}
		if _, sharded := d.Spec.Template.Labels["kcm-split.io/shards"]; sharded && matched != 1 {
			t.Errorf("Deployment %s selects %d shards' Pods, want its own only", d.Name, matched)
		}
	}
	// The unsharded controllers are untouched.
	for _, alias := range v.Aliases() {
		if slices.Contains(shardedAliases, alias) {
			continue
		}
		name := "kcm-split-" + v.Controllers[alias].Binary
		if _, ok := deps[name]; !ok {
			t.Errorf("%s: Deployment %s missing", alias, name)
		}
		if _, _, all := leaseRules(t, roleOf(t, objs, name)); all {
			t.Errorf("%s: unfiltered list/watch of Leases granted to an unsharded controller", alias)
		}
	}
}

func serviceSelector(t *testing.T, objs []Object, name string) map[string]string {
	t.Helper()
	for _, o := range objs {
		if s, ok := o.Typed.(*corev1.Service); ok && o.Name == name {
			return s.Spec.Selector
		}
	}
	t.Fatalf("no Service %s", name)
	return nil
}

func countOf(args []string, s string) int {
	n := 0
	for _, a := range args {
		if a == s {
			n++
		}
	}
	return n
}

// shardLayoutFence with one shard: today's Deployment name and selector (a selector cannot
// change in place), --shards=1 --shard-index=0, layout labels on the Pods, and the unfiltered
// Lease read the fence needs.
func TestShardLayoutFenceAtOne(t *testing.T) {
	c, v := chart(t)
	objs := render(t, c, "kcm-split", ns, append(v.Only("endpoints"), "--set", "controllers.endpoints.shardLayoutFence=true")...)
	today := render(t, c, "kcm-split", ns, v.Only("endpoints")...)
	name := "kcm-split-endpoints-controller"
	d, old := deploymentOf(t, objs, name), deploymentOf(t, today, name)
	if !equalMaps(d.Spec.Selector.MatchLabels, old.Spec.Selector.MatchLabels) {
		t.Errorf("selector %v, want today's %v", d.Spec.Selector.MatchLabels, old.Spec.Selector.MatchLabels)
	}
	args := d.Spec.Template.Spec.Containers[0].Args
	if countOf(args, "--shards=1") != 1 || countOf(args, "--shard-index=0") != 1 {
		t.Errorf("args %v: want --shards=1 --shard-index=0 once each", args)
	}
	if l := d.Spec.Template.Labels; l["kcm-split.io/shards"] != "1" || l["kcm-split.io/shard-index"] != "0" {
		t.Errorf("Pod labels %v lack the layout labels", l)
	}
	named, _, all := leaseRules(t, roleOf(t, objs, name))
	if !slices.Equal(named, []string{"endpoints-controller"}) || !all {
		t.Errorf("Lease rules: named %v, unfiltered list/watch %t; want [endpoints-controller] and the unfiltered read", named, all)
	}
}

// Sharding only where the binary shards, within bounds, and not during a switch from
// kube-controller-manager.
func TestShardsRefused(t *testing.T) {
	c, _ := chart(t)
	for _, tc := range []struct {
		set  []string
		want string
	}{
		{[]string{"controllers.endpoints.shards=0"}, "/controllers/endpoints/shards"},
		{[]string{"controllers.quota.shards=65"}, "/controllers/quota/shards"},
		{[]string{"controllers.quota.shards=two"}, "/controllers/quota/shards"},
		{[]string{"controllers.namespace.shards=2"}, "/controllers/namespace/shards"},
		{[]string{"controllers.nodelifecycle.shards=1"}, "/controllers/nodelifecycle/shards"},
		{[]string{"controllers.pvbinder.shardLayoutFence=true"}, "/controllers/pvbinder/shardLayoutFence"},
		{[]string{"controllers.servicelb.shards=2"}, "/controllers/servicelb/shards"},
		{[]string{"controllers.endpoints.enabled=true", "controllers.endpoints.shards=2", "takeOverFromKCM.enabled=true"}, "sharding cannot be combined with takeOverFromKCM.enabled"},
		{[]string{"controllers.quota.enabled=true", "controllers.quota.shards=2", "leaderMigration.enabled=true"}, "sharding cannot be combined with leaderMigration.enabled"},
	} {
		var args []string
		for _, s := range tc.set {
			args = append(args, "--set", s)
		}
		_, err := c.Template("r", ns, args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want an error mentioning %q", tc.set, err, tc.want)
		}
	}
	// Far names keep the shard suffix whole: the controller's name is cut, never the suffix.
	objs := render(t, c, "r", ns, "--set", "controllers.endpoints.enabled=true", "--set", "controllers.endpoints.shards=64",
		"--set", "fullnameOverride="+strings.Repeat("a", 60))
	seen := map[string]bool{}
	for _, o := range byKind(objs, "Deployment") {
		if len(o.Name) > 63 || seen[o.Name] {
			t.Errorf("Deployment name %q: longer than 63 or repeated", o.Name)
		}
		seen[o.Name] = true
	}
	if len(seen) != 64 {
		t.Errorf("%d Deployments for 64 shards", len(seen))
	}
}
