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

	"github.com/kcm-split/kcm-split/shared/sharding"
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

// shardedRender renders endpoints with 3 shards of the default hash (mixed) and quota with 2
// of fnv, 3 replicas each (so every shard gets a budget), every other controller on.
func shardedRender(t *testing.T, c *Chart, v *Values) []Object {
	t.Helper()
	return render(t, c, "kcm-split", ns, append(allOn(v),
		"--set", "controllers.endpoints.shards=3", "--set", "controllers.quota.shards=2", "--set", "controllers.quota.shardHash=fnv",
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
	for alias, layout := range map[string]struct {
		n    int
		hash string
	}{"endpoints": {3, "mixed"}, "quota": {2, "fnv"}} {
		n := layout.n
		cv := v.Controllers[alias]
		base := "kcm-split-" + cv.Binary
		if _, ok := deps[base]; ok {
			t.Errorf("%s: the unsharded Deployment %s is still rendered", alias, base)
		}
		// fnv layouts keep the names and labels they had before the choice of hash.
		suffix := map[string]string{"mixed": "-mixed", "fnv": ""}[layout.hash]
		shardName := func(i int) string { return fmt.Sprintf("%s-shard-%d-of-%d%s", base, i, n, suffix) }
		var wantLeases []string
		for i := 0; i < n; i++ {
			name := shardName(i)
			wantLeases = append(wantLeases, fmt.Sprintf("%s-shard-%d-of-%d%s", cv.Binary, i, n, suffix))
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
			if layout.hash != "fnv" {
				wantLabels["kcm-split.io/shard-hash"] = layout.hash
			}
			for what, l := range map[string]map[string]string{"Pod": pod.Labels, "selector": d.Spec.Selector.MatchLabels, "Deployment": d.Labels} {
				if !isSubset(wantLabels, l) {
					t.Errorf("%s: %s labels %v lack %v", name, what, l, wantLabels)
				}
				if _, ok := l["kcm-split.io/shard-hash"]; ok && layout.hash == "fnv" {
					t.Errorf("%s: %s labels %v name the hash of an fnv layout (its selector must stay what it was)", name, what, l)
				}
			}
			podLabels = append(podLabels, pod.Labels)
			args := pod.Spec.Containers[0].Args
			// --shard-hash always, fnv too: the binary's own default is mixed.
			for _, want := range []string{fmt.Sprintf("--shards=%d", n), fmt.Sprintf("--shard-index=%d", i), "--shard-hash=" + layout.hash, "--leader-elect-resource-name=" + cv.Binary} {
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
				d := deps[shardName(i)]
				if d != nil && !labels.SelectorFromSet(pol.Spec.PodSelector.MatchLabels).Matches(labels.Set(d.Spec.Template.Labels)) {
					t.Errorf("NetworkPolicy %s does not select shard %d's Pods", base, i)
				}
			}
		}
		svcSel := serviceSelector(t, objs, base)
		for i := 0; i < n; i++ {
			d := deps[shardName(i)]
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
		{[]string{"controllers.namespace.shardHash=fnv"}, "/controllers/namespace/shardHash"},
		{[]string{"controllers.servicelb.shardOverrides.0.kubeAPIQPS=5"}, "/controllers/servicelb/shardOverrides"},
		{[]string{"controllers.endpoints.shardHash=md5"}, "/controllers/endpoints/shardHash"},
		// helm's schema library reports a bad property name at a wrong path; the pattern is right.
		{[]string{"controllers.endpoints.shardOverrides.first.kubeAPIQPS=5"}, "'first' does not match pattern '^(0|[1-9][0-9]?)$'"},
		{[]string{"controllers.endpoints.shardOverrides.0.qps=5"}, "/controllers/endpoints/shardOverrides"},
		{[]string{"controllers.endpoints.shardOverrides.0.kubeAPIBurst=0"}, "/controllers/endpoints/shardOverrides"},
		{[]string{"controllers.endpoints.enabled=true", "controllers.endpoints.shards=2", "controllers.endpoints.shardOverrides.2.kubeAPIQPS=5"}, "controllers.endpoints.shardOverrides.2: no such shard with shards=2"},
		{[]string{"controllers.quota.enabled=true", "controllers.quota.shardOverrides.0.kubeAPIQPS=5"}, "controllers.quota.shardOverrides: set with shards=1"},
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

// controllers.<alias>.shardOverrides gives one shard its own client budget: that shard's Pods
// get the override (qps and burst each on their own), the others the controller's budget.
func TestShardOverrides(t *testing.T) {
	c, v := chart(t)
	objs := render(t, c, "kcm-split", ns, append(v.Only("endpoints"),
		"--set", "controllers.endpoints.shards=3", "--set", "controllers.endpoints.kubeAPIQPS=10", "--set", "controllers.endpoints.kubeAPIBurst=15",
		"--set", "controllers.endpoints.shardOverrides.0.kubeAPIQPS=40", "--set", "controllers.endpoints.shardOverrides.0.kubeAPIBurst=60",
		"--set", "controllers.endpoints.shardOverrides.2.kubeAPIBurst=30")...)
	for i, want := range [][]string{{"--kube-api-qps=40", "--kube-api-burst=60"}, {"--kube-api-qps=10", "--kube-api-burst=15"}, {"--kube-api-qps=10", "--kube-api-burst=30"}} {
		d := deploymentOf(t, objs, fmt.Sprintf("kcm-split-endpoints-controller-shard-%d-of-3-mixed", i))
		args := d.Spec.Template.Spec.Containers[0].Args
		for _, w := range want {
			if countOf(args, w) != 1 {
				t.Errorf("shard %d: %s not once in %v", i, w, args)
			}
		}
		n := 0
		for _, a := range args {
			if strings.HasPrefix(a, "--kube-api-qps=") || strings.HasPrefix(a, "--kube-api-burst=") {
				n++
			}
		}
		if n != 2 {
			t.Errorf("shard %d: %d budget flags in %v, want one qps and one burst", i, n, args)
		}
	}
}

// The chart's default hash is mixed, as the binaries' --shard-hash (shared/app's
// TestShardHashFlag) and as the chart e2e assumes (chartHash): the chart passes --shard-hash
// always, so a mismatch would not change a render, but the READMEs say they are one default.
func TestShardHashDefault(t *testing.T) {
	_, v := chart(t)
	for _, alias := range shardedAliases {
		if got := v.Controllers[alias].ShardHash; got != string(sharding.HashMixed) {
			t.Errorf("controllers.%s.shardHash defaults to %q, want %q", alias, got, sharding.HashMixed)
		}
	}
}
