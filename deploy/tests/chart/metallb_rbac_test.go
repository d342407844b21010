package chart

// Render checks of service-lb's MetalLB grants: metallb.io IPAddressPools are read (and their
// status written) only with --pool-api naming metallb, and only in --metallb-namespace, the one
// namespace the binary's informer watches; no ClusterRole carries them.

import (
	"maps"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

// metallbGrants returns, per namespace ("" for a ClusterRole), the metallb.io rules granted.
func metallbGrants(objs []Object) map[string][]rbacv1.PolicyRule {
	out := map[string][]rbacv1.PolicyRule{}
	for _, o := range objs {
		var rules []rbacv1.PolicyRule
		switch r := o.Typed.(type) {
		case *rbacv1.ClusterRole:
			rules = r.Rules
		case *rbacv1.Role:
			rules = r.Rules
		}
		for _, rule := range rules {
			if slices.Contains(rule.APIGroups, "metallb.io") || slices.Contains(rule.APIGroups, "*") {
				out[o.Namespace] = append(out[o.Namespace], rule)
			}
		}
	}
	return out
}

func TestServiceLBMetalLBGrants(t *testing.T) {
	c, v := chart(t)
	base := v.Only("servicelb")
	for _, tc := range []struct {
		name string
		args []string
		want string // the namespace granted; "" for none
	}{
		{"default pool API", nil, ""},
		{"kcm-split pools only", []string{"--set", "controllers.servicelb.flags.pool-api=kcm-split"}, ""},
		{"metallb", []string{"--set", "controllers.servicelb.flags.pool-api=metallb"}, "metallb-system"},
		{"both, own namespace", []string{"--set", `controllers.servicelb.flags.pool-api=kcm-split\, metallb`, "--set", "controllers.servicelb.flags.metallb-namespace=lb"}, "lb"},
		// The release's own namespace: the grants join the controller's one Role there.
		{"release namespace", []string{"--set", "controllers.servicelb.flags.pool-api=metallb", "--set", "controllers.servicelb.flags.metallb-namespace=" + ns}, ns},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := render(t, c, "kcm-split", ns, append(slices.Clone(base), tc.args...)...)
			checkRenderedOnce(t, objs)
			got := metallbGrants(objs)
			if tc.want == "" {
				if len(got) > 0 {
					t.Fatalf("metallb.io granted without --pool-api naming metallb: %v", got)
				}
				return
			}
			if len(got) != 1 || got[tc.want] == nil {
				t.Fatalf("metallb.io granted in %q, want only in namespace %s", slices.Sorted(maps.Keys(got)), tc.want)
			}
			var perms []string
			for _, r := range got[tc.want] {
				if len(r.ResourceNames) > 0 {
					t.Errorf("rule %+v names objects: the binary lists every pool of the namespace", r)
				}
				for _, res := range r.Resources {
					for _, verb := range r.Verbs {
						perms = append(perms, verb+" "+res)
					}
				}
			}
			slices.Sort(perms)
			if want := []string{"list ipaddresspools", "update ipaddresspools/status", "watch ipaddresspools"}; !slices.Equal(perms, want) {
				t.Errorf("metallb.io in %s: %v, want %v", tc.want, perms, want)
			}
			// The Role is bound to the controller's ServiceAccount in the release namespace.
			bound := false
			for _, o := range objs {
				if rb, ok := o.Typed.(*rbacv1.RoleBinding); ok && rb.Namespace == tc.want {
					bound = bound || rb.RoleRef.Kind == "Role" && len(rb.Subjects) == 1 && rb.Subjects[0].Kind == "ServiceAccount" && rb.Subjects[0].Namespace == ns
				}
			}
			if !bound {
				t.Errorf("no RoleBinding in %s of the Role to the controller's ServiceAccount in %s", tc.want, ns)
			}
		})
	}
	// Given in extraArgs, the flags would bypass the grants: the chart refuses them.
	for _, arg := range []string{"--pool-api=metallb", "--metallb-namespace=lb", "--pool-api"} {
		_, err := c.Template("kcm-split", ns, append(slices.Clone(base), "--set", "controllers.servicelb.extraArgs[0]="+arg)...)
		if err == nil || !strings.Contains(err.Error(), "set controllers.servicelb.flags.") {
			t.Errorf("extraArgs %s: got %v, want the chart to refuse it and name the flags value", arg, err)
		}
	}
}
