package sharding

import (
	"fmt"
	"math/rand/v2"
	"slices"
)

// Namespace names as clusters really have them, for measuring a hash's spread: the rows of the
// spread table (TestSpreadTable, shared/README.md "Sharding"), the namespaces of the sharded
// scale runs (deploy/tests/scale TestShards) and of the sharding drill (deploy/tests/drills
// TestShardingDrill). Every set is drawn from a fixed seed: the same names on every run.

// NameSet is a set of namespace names typical of one way of naming namespaces.
type NameSet struct {
	Name  string
	Names []string
}

// NameSets are the sets measured: tenants numbered, team x environment, the system
// namespaces of common add-ons, preview environments, random names, and "platform", all of
// them in one cluster (1192 names).
func NameSets() []NameSet {
	rng := rand.New(rand.NewPCG(48, 1))
	var tenants, teamEnv, system, previews, random []string
	for i := range 400 {
		tenants = append(tenants, fmt.Sprintf("tenant-%04d", i))
	}
	var teams []string
	for c := 'a'; c <= 'z'; c++ {
		teams = append(teams, "team-"+string(c))
	}
	teams = append(teams, "payments", "checkout", "search", "catalog", "billing", "identity", "orders",
		"shipping", "inventory", "pricing", "ledger", "notifications", "reporting", "gateway")
	for _, team := range teams {
		for _, env := range []string{"dev", "qa", "staging", "prod"} {
			teamEnv = append(teamEnv, team+"-"+env)
		}
	}
	system = []string{"default", "kube-system", "kube-public", "kube-node-lease", "cert-manager", "ingress-nginx",
		"monitoring", "logging", "argocd", "istio-system", "gatekeeper-system", "flux-system", "velero",
		"external-dns", "cattle-system", "kyverno", "metallb-system", "local-path-storage", "tigera-operator",
		"calico-system", "keda", "vault", "external-secrets", "opentelemetry", "sealed-secrets", "kubernetes-dashboard",
		"linkerd", "knative-serving", "tekton-pipelines", "crossplane-system", "prometheus", "loki"}
	seen := map[int]bool{}
	for len(previews) < 300 {
		if pr := 1000 + rng.IntN(9000); !seen[pr] {
			seen[pr] = true
			previews = append(previews, fmt.Sprintf("pr-%d", pr))
		}
	}
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	for range 300 {
		b := make([]byte, 5+rng.IntN(16))
		for i := range b {
			b[i] = alphabet[rng.IntN(26)] // a letter first
			if i > 0 {
				b[i] = alphabet[rng.IntN(len(alphabet))]
			}
		}
		random = append(random, string(b))
	}
	return []NameSet{
		{"`tenant-0000`..`tenant-0399`", tenants},
		{"team x env (`team-a-dev`, `payments-prod`)", teamEnv},
		{"system (`kube-system`, `cert-manager`, ...)", system},
		{"previews `pr-<4 digits>`", previews},
		{"random names", random},
		{"platform: all of the above", slices.Concat(tenants, teamEnv, system, previews, random)},
	}
}

// builtinNamespaces are the namespaces every cluster already has.
var builtinNamespaces = []string{"default", "kube-system", "kube-public", "kube-node-lease"}

// RealisticNamespaces returns the first n names of the platform set in a fixed shuffled order,
// the four namespaces every cluster has left out: names a test can create, every family in
// proportion to its size whatever n. There are 1188; asking for more returns them all.
func RealisticNamespaces(n int) []string {
	sets := NameSets()
	var names []string
	for _, ns := range sets[len(sets)-1].Names {
		if !slices.Contains(builtinNamespaces, ns) {
			names = append(names, ns)
		}
	}
	rng := rand.New(rand.NewPCG(48, 4))
	rng.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	return names[:min(n, len(names))]
}
