package chart

import (
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"

	"github.com/kcm-split/kcm-split/shared/testenv"
)

// shardedScenario is alias's RBAC scenario as a sharded binary meets it: what the shards'
// live reads need is allowed (rbac/<alias>.yaml's shardedClusterRules), and what they make
// unneeded is excused.
func shardedScenario(alias string) scenario {
	sc := scenarios[alias]
	if alias != "endpoints" {
		return sc
	}
	sc.forbidden = slices.DeleteFunc(slices.Clone(sc.forbidden), func(ra authorizationv1.ResourceAttributes) bool {
		return ra.Verb == "get" && ra.Group == "" && (ra.Resource == "endpoints" || ra.Resource == "services")
	})
	sc.unused = with(sc.unused, map[string]string{
		"delete /endpoints": "a shard reads the Endpoints live before deleting them, and the apiserver deletes a Service's Endpoints with the Service: the read finds none",
	})
	return sc
}

// The sharded binaries under the chart's RBAC for shards=2: both shards run with the chart's
// command lines under the one ServiceAccount, the controller's scenario succeeds (its
// namespace is served by the shard that owns it), nothing is denied, every permission is used
// (runUnderChartRBAC); and the layout fence's unfiltered list and watch of the release
// namespace's Leases, which the chart grants only with the layout fence, were made and
// allowed.
func TestShardedControllersUnderChartRBAC(t *testing.T) {
	testenv.Require(t, env)
	c, v := chart(t)
	installCRDs(t, c.Dir+"/crds")
	for _, alias := range shardedAliases {
		t.Run(alias, func(t *testing.T) {
			start := time.Now()
			binary := v.Controllers[alias].Binary
			runUnderChartRBAC(t, c, v, alias, shardedScenario(alias), "--set", "controllers."+alias+".shards=2")
			events, err := env.Audit(func(ev testenv.AuditEvent) bool {
				return strings.HasPrefix(ev.UserAgent, binary+"/") && ev.ObjectRef.Resource == "leases" &&
					strings.HasPrefix(ev.User.Username, "system:serviceaccount:"+ev.ObjectRef.Namespace+":ct-"+alias+"-") &&
					ev.ObjectRef.Name == "" && !strings.Contains(ev.RequestURI, "fieldSelector")
			})
			if err != nil {
				t.Fatal(err)
			}
			ok := map[string]int{}
			for _, ev := range events {
				if ev.ResponseStatus.Code == 200 {
					ok[ev.Verb]++
				} else {
					t.Errorf("unfiltered %s of Leases: %d", ev.Verb, ev.ResponseStatus.Code)
				}
			}
			if ok["list"] == 0 && ok["watch"] == 0 {
				t.Errorf("no unfiltered list or watch of Leases by %s's shards: the layout fence did not run (events %d)", binary, len(events))
			}
			t.Logf("%s, 2 shards: unfiltered Lease reads allowed %v; %s", alias, ok, time.Since(start).Round(time.Millisecond))
		})
	}
}
