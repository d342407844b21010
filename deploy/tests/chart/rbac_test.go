package chart

// The RBAC proof: each controller's RBAC, rendered by the chart, is applied to a real
// kube-apiserver (RBAC authorization on); the controller binary runs with its
// ServiceAccount's token (TokenRequest) and the command line the chart renders. The test
// shows that its scenario succeeds, that it was never denied anything, that every permission
// it holds was used (or is listed below with the reason the scenario cannot trigger it), and
// that requests outside its role are forbidden.

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	dto "github.com/prometheus/client_model/go"

	"github.com/kcm-split/kcm-split/shared/sharding"
	"github.com/kcm-split/kcm-split/shared/testenv"
)

// scenario is one controller's part of the RBAC test.
type scenario struct {
	// run exercises the controller as its own integration tests do; admin is an admin
	// client, ns a fresh namespace for the test's objects. snapshot scrapes /metrics (and
	// returns it), for series that exist only in the middle of the scenario.
	run func(t *testing.T, admin kubernetes.Interface, ns string, snapshot func() string)
	// forbidden are requests outside the role; each must be denied.
	forbidden []authorizationv1.ResourceAttributes
	// unused are permissions (verb group/resource) the role grants that the scenario cannot
	// make the controller use, with the reason.
	unused map[string]string
	// pending are permissions granted ahead of the code that will use them, with the reason.
	// Unlike unused, a pending permission the controller uses fails the test: once the code
	// lands, the entry goes (or moves to unused if only a failure path needs it).
	pending map[string]string
	// args are test-only flags, appended to the chart's command line.
	args []string
}

// Permissions a controller holds for its failure paths only.
var (
	eventsOnFailure = map[string]string{
		"create /events": "Events are written on failure paths the scenario does not take",
		"patch /events":  "only a repeated Event is patched",
	}
	// The ConfigMaps kept for the next Lease holder are read at each term's start; they are
	// created and written only while there is something to keep (a foreign writer at it, a
	// quota that cannot be counted in full), which the scenarios do not make.
	leaseStateUnused = map[string]string{
		"create /configmaps": "created only when there is something to keep for the next Lease holder",
		"update /configmaps": "written only while there is something to keep for the next Lease holder",
	}
)

func with(m map[string]string, more ...map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = v
	}
	for _, more := range more {
		for k, v := range more {
			out[k] = v
		}
	}
	return out
}

var scenarios = map[string]scenario{
	"endpoints": {
		run: endpointsScenario,
		forbidden: []authorizationv1.ResourceAttributes{
			{Verb: "list", Resource: "secrets"},
			{Verb: "delete", Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-system", Name: "kube-controller-manager"},
			{Verb: "update", Resource: "services"},
			{Verb: "get", Resource: "endpoints"},
			{Verb: "get", Group: "discovery.k8s.io", Resource: "endpointslices"},
			{Verb: "patch", Group: "discovery.k8s.io", Resource: "endpointslices"},
			{Verb: "get", Resource: "nodes"},
			{Verb: "update", Resource: "nodes"},
			{Verb: "update", Resource: "pods", Subresource: "status"},
			{Verb: "update", Resource: "configmaps", Namespace: "kube-system", Name: "endpoints-controller-staleness"},
		},
		unused: with(eventsOnFailure, map[string]string{
			"update /services/finalizers":  "checked by the OwnerReferencesPermissionEnforcement admission plugin (off here) when a slice blocks its Service's deletion; no request of the controller",
			"update /endpoints/finalizers": "the same check for a mirrored slice blocking its Endpoints' deletion; no request of the controller",
		}, leaseStateUnused),
	},
	"namespace": {
		run: namespaceScenario,
		// Its role is wide by nature (delete and list of every resource, as upstream's):
		// what it must not do is create or change anything.
		forbidden: []authorizationv1.ResourceAttributes{
			{Verb: "get", Resource: "secrets", Namespace: "default", Name: "x"},
			{Verb: "create", Resource: "configmaps", Namespace: "default"},
			{Verb: "create", Resource: "namespaces"},
			{Verb: "update", Resource: "namespaces"},
			{Verb: "patch", Resource: "namespaces"},
			{Verb: "update", Resource: "pods", Namespace: "default"},
			{Verb: "watch", Resource: "secrets"},
			// Its discovery memory is its own ConfigMap beside its Lease, nothing else.
			{Verb: "update", Resource: "configmaps", Namespace: "kube-system", Name: "namespace-controller-discovery"},
			{Verb: "get", Resource: "configmaps", Namespace: "default", Name: "namespace-controller-discovery"},
			{Verb: "get", Resource: "configmaps", Namespace: "default", Name: "namespace-controller-foreign-writers"},
			{Verb: "update", Resource: "configmaps", Namespace: "kube-system", Name: "namespace-controller-foreign-writers"},
		},
		unused: with(eventsOnFailure, map[string]string{
			"get /namespaces": "a namespace is read again only after a write conflict",
			"delete */*":      "objects are deleted one by one only where a resource has no deletecollection",
			"update /configmaps": "the discovery memory is written again only when discovery changes or every 2 minutes; " +
				"the scenario's discovery does not change (created at the first discovery, read at start); " +
				"the foreign-writer episodes are written only while there is something to keep for the next Lease holder",
		}),
		// The flag makes it keep its discovery memory in the ConfigMap the Role grants.
		args: []string{"--namespace-sync-period=5s", "--allow-deletion-with-unavailable-groups=1h"},
	},
	"nodelifecycle": {
		run: nodelifecycleScenario,
		forbidden: []authorizationv1.ResourceAttributes{
			{Verb: "list", Resource: "secrets"},
			{Verb: "update", Resource: "nodes"},
			{Verb: "delete", Resource: "nodes"},
			{Verb: "update", Resource: "pods", Namespace: "default"},
			{Verb: "create", Resource: "pods", Subresource: "eviction", Namespace: "default"},
			{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-node-lease", Name: "node-1"},
			{Verb: "list", Group: "coordination.k8s.io", Resource: "leases", Namespace: "default"},
			// What it keeps for the next Lease holder is its own ConfigMap beside its Lease.
			{Verb: "update", Resource: "configmaps", Namespace: "kube-system", Name: "namespace-controller-discovery"},
			{Verb: "get", Resource: "configmaps", Namespace: "default", Name: "nodelifecycle-controller-state"},
		},
		unused: with(eventsOnFailure, map[string]string{
			"get /nodes":                           "a Node is read again only after a write conflict",
			"get networking.k8s.io/ipaddresses":    "a range claim is read back only when another process created it first",
			"delete networking.k8s.io/ipaddresses": "a range claim is deleted only when its Node is verified gone",
		}),
		// The two keep flags make it keep its state in the ConfigMap the Role grants.
		args: []string{"--node-monitor-period=1s", "--node-monitor-grace-period=4s", "--node-startup-grace-period=4s", "--node-eviction-rate=10",
			"--keep-eviction-pace", "--keep-signs-of-life",
			"--allocate-node-cidrs", "--cluster-cidr=" + ipamClusterCIDR, "--node-cidr-mask-size=24"},
	},
	"pvbinder": {
		run: pvbinderScenario,
		forbidden: []authorizationv1.ResourceAttributes{
			{Verb: "list", Resource: "secrets"},
			{Verb: "delete", Resource: "persistentvolumeclaims", Namespace: "default"},
			{Verb: "create", Resource: "persistentvolumeclaims", Namespace: "default"},
			{Verb: "get", Resource: "pods", Namespace: "default"},
			{Verb: "update", Resource: "pods", Namespace: "default"},
			{Verb: "update", Group: "storage.k8s.io", Resource: "storageclasses"},
			// What it keeps for its next Lease holder is its own ConfigMap beside its Lease.
			{Verb: "update", Resource: "configmaps", Namespace: "kube-system", Name: "pv-binder-controller-foreign-writers"},
			{Verb: "get", Resource: "configmaps", Namespace: "default", Name: "pv-binder-controller-foreign-writers"},
		},
		unused: with(eventsOnFailure, map[string]string{
			"get /persistentvolumeclaims": "a claim missing from the cache is read live before its volume is released",
		}, leaseStateUnused),
		// The scenario provisions and deletes a host-path volume (create and delete PVs).
		args: []string{"--enable-hostpath-provisioner"},
	},
	"quota": {
		run: quotaScenario,
		// It may list and watch every resource (a quota can count any): it must not read
		// single objects or write anything but quota status.
		forbidden: []authorizationv1.ResourceAttributes{
			{Verb: "get", Resource: "secrets", Namespace: "default", Name: "x"},
			{Verb: "update", Resource: "resourcequotas", Namespace: "default"},
			{Verb: "create", Resource: "configmaps", Namespace: "default"},
			{Verb: "delete", Resource: "pods", Namespace: "default"},
			{Verb: "delete", Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-system", Name: "kube-controller-manager"},
			// What it keeps for its next Lease holder is its own ConfigMaps beside its Lease.
			{Verb: "update", Resource: "configmaps", Namespace: "kube-system", Name: "quota-controller-staleness"},
			{Verb: "get", Resource: "configmaps", Namespace: "default", Name: "quota-controller-foreign-writers"},
		},
		unused: with(eventsOnFailure, leaseStateUnused),
	},
	"servicelb": {
		run: servicelbScenario,
		forbidden: []authorizationv1.ResourceAttributes{
			{Verb: "update", Resource: "services", Namespace: "default"},
			{Verb: "update", Resource: "nodes"},
			{Verb: "create", Group: "lb.kcm-split.io", Resource: "ipaddresspools"},
			{Verb: "update", Group: "lb.kcm-split.io", Resource: "ipaddresspools"},
			{Verb: "list", Resource: "secrets"},
			// What it keeps for its next Lease holder is its own ConfigMap beside its Lease.
			{Verb: "update", Resource: "configmaps", Namespace: "kube-system", Name: "service-lb-controller-overwrites"},
			{Verb: "get", Resource: "configmaps", Namespace: "default", Name: "service-lb-controller-overwrites"},
			{Verb: "update", Resource: "configmaps", Namespace: "kube-system", Name: "service-lb-controller-foreign-writers"},
		},
		// MetalLB's pools are granted only with --pool-api=metallb (metallb_rbac_test.go; make
		// lb-e2e runs service-lb so, under the chart's RBAC).
		unused: with(eventsOnFailure, leaseStateUnused),
	},
}

func TestControllersUnderChartRBAC(t *testing.T) {
	testenv.Require(t, env)
	c, v := chart(t)
	families := map[string]map[string]bool{} // metric family -> binaries exporting it
	installCRDs(t, filepath.Join(c.Dir, "crds"))
	for _, alias := range v.Aliases() {
		t.Run(alias, func(t *testing.T) {
			sc, ok := scenarios[alias]
			if !ok {
				t.Fatalf("no RBAC scenario for controller %s: add one to scenarios", alias)
			}
			bodies := runUnderChartRBAC(t, c, v, alias, sc)
			fams := map[string]dto.MetricType{}
			for _, body := range bodies {
				f, err := Families(body)
				if err != nil {
					t.Fatalf("parsing /metrics: %v", err)
				}
				for name, typ := range f {
					fams[name] = typ
				}
			}
			checkDashboardMetrics(t, filepath.Join(c.Dir, "dashboards", alias+".json"),
				func(n string) bool { return Exported(n, fams) }, "which the binary does not export")
			for name := range fams {
				if families[name] == nil {
					families[name] = map[string]bool{}
				}
				families[name][alias] = true
			}
		})
	}
	t.Run("overview", func(t *testing.T) {
		if len(families) == 0 {
			t.Skip("no controller ran")
		}
		checkDashboardMetrics(t, filepath.Join(c.Dir, "dashboards", "overview.json"),
			func(n string) bool { return exportedByAny(n, families) }, "which no controller binary exports")
	})
	// Every metric an alert names, exported by a binary after its scenario: checked only
	// when every controller ran (a -run of one controller cannot tell).
	t.Run("alerts", func(t *testing.T) {
		ran := map[string]bool{}
		for _, bins := range families {
			for alias := range bins {
				ran[alias] = true
			}
		}
		if len(ran) < len(v.Aliases()) {
			t.Skipf("only %d of %d controllers ran", len(ran), len(v.Aliases()))
		}
		checkAlertMetrics(t, c, v, func(n string) bool { return exportedByAny(n, families) })
	})
}

// checkAlertMetrics fails t for every metric an alert of the chart's PrometheusRule (every
// controller enabled) names that exported lacks.
func checkAlertMetrics(t *testing.T, c *Chart, v *Values, exported func(name string) bool) {
	t.Helper()
	_, _, groups := renderRules(t, c, ruleArgs(v)...)
	alerts := Alerts(groups)
	for _, name := range SortedKeys(alerts) {
		for _, r := range alerts[name] {
			names, err := MetricNames(r.Expr)
			if err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			for _, n := range names {
				if _, optIn := OptIn[n]; !Synthetic[n] && !optIn && !exported(n) {
					t.Errorf("alert %s queries %s, which no controller binary exports", name, n)
				}
			}
		}
	}
}

func exportedByAny(name string, families map[string]map[string]bool) bool {
	for fam := range families {
		if name == fam || strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count") == fam {
			return true
		}
	}
	return false
}

// runUnderChartRBAC runs alias under the chart's RBAC and returns its /metrics, scraped
// during and after the scenario. values are more --set arguments; with shards, one process
// runs per rendered Deployment (each shard with its own command line), all under the one
// ServiceAccount, and the scenario's namespace is served by whichever shard owns it.
// Over 80 lines: the rendered RBAC created, a process per Deployment run under its token, then the grants checked against that same run's audit log.
func runUnderChartRBAC(t *testing.T, c *Chart, v *Values, alias string, sc scenario, values ...string) []string {
	ctx := context.Background()
	admin := env.Client(t)
	cv := v.Controllers[alias]
	release := env.Namespace(t) // the release namespace: ServiceAccount, Role, Lease
	objs := render(t, c, "ct-"+alias, release, append(v.Only(alias), values...)...)

	var (
		sa     *corev1.ServiceAccount
		deps   []*appsv1.Deployment
		grants []rbacv1.PolicyRule
		lease  string
	)
	for _, o := range objs {
		switch obj := o.Typed.(type) {
		case *corev1.ServiceAccount:
			sa = obj
			mustCreate(t, func() error {
				_, err := admin.CoreV1().ServiceAccounts(release).Create(ctx, obj, metav1.CreateOptions{})
				return err
			})
		case *rbacv1.ClusterRole:
			grants = append(grants, obj.Rules...)
			mustCreate(t, func() error {
				_, err := admin.RbacV1().ClusterRoles().Create(ctx, obj, metav1.CreateOptions{})
				return err
			})
			t.Cleanup(func() { _ = admin.RbacV1().ClusterRoles().Delete(ctx, obj.Name, metav1.DeleteOptions{}) })
		case *rbacv1.ClusterRoleBinding:
			mustCreate(t, func() error {
				_, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, obj, metav1.CreateOptions{})
				return err
			})
			t.Cleanup(func() { _ = admin.RbacV1().ClusterRoleBindings().Delete(ctx, obj.Name, metav1.DeleteOptions{}) })
		case *rbacv1.Role:
			grants = append(grants, obj.Rules...)
			mustCreate(t, func() error {
				_, err := admin.RbacV1().Roles(obj.Namespace).Create(ctx, obj, metav1.CreateOptions{})
				return err
			})
			t.Cleanup(func() { _ = admin.RbacV1().Roles(obj.Namespace).Delete(ctx, obj.Name, metav1.DeleteOptions{}) })
		case *rbacv1.RoleBinding:
			mustCreate(t, func() error {
				_, err := admin.RbacV1().RoleBindings(obj.Namespace).Create(ctx, obj, metav1.CreateOptions{})
				return err
			})
			t.Cleanup(func() { _ = admin.RbacV1().RoleBindings(obj.Namespace).Delete(ctx, obj.Name, metav1.DeleteOptions{}) })
		case *appsv1.Deployment:
			deps = append(deps, obj)
		}
	}
	if sa == nil || len(deps) == 0 || len(grants) == 0 {
		t.Fatalf("the chart rendered no ServiceAccount, Deployment or roles for %s", alias)
	}

	// The ServiceAccount's token, as a Pod would get it.
	tr, err := admin.CoreV1().ServiceAccounts(release).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(3600))},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest: %v", err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "sa.kubeconfig")
	if err := testenv.WriteKubeconfig(kubeconfig, env.Host, "controller", tr.Status.Token); err != nil {
		t.Fatal(err)
	}
	user := fmt.Sprintf("system:serviceaccount:%s:%s", release, sa.Name)

	// The chart's command line, serving HTTPS on a free port (the chart's port is fixed per
	// binary); StartController adds plain HTTP on another free port for the test's scrapes.
	// The first process's port and Lease are the ones checked below.
	bin := buildBinary(t, alias, cv.Binary)
	var ctrls []*testenv.Controller
	securePort := 0
	for _, dep := range deps {
		port, err := testenv.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		var args []string
		base, shard := "", sharding.Whole
		for _, a := range dep.Spec.Template.Spec.Containers[0].Args {
			if strings.HasPrefix(a, "--secure-port=") {
				a = fmt.Sprintf("--secure-port=%d", port)
			}
			if name, ok := strings.CutPrefix(a, "--leader-elect-resource-name="); ok {
				base = name
			}
			if i, ok := strings.CutPrefix(a, "--shard-index="); ok {
				shard.Index, _ = strconv.Atoi(i)
			}
			if n, ok := strings.CutPrefix(a, "--shards="); ok {
				shard.Count, _ = strconv.Atoi(n)
			}
			if h, ok := strings.CutPrefix(a, "--shard-hash="); ok {
				shard.Hash = sharding.Hash(h)
			}
			args = append(args, a)
		}
		// The Lease the binary elects on, by shared/sharding's LeaseName from the rendered
		// flags: the chart's name with one shard, <name>-shard-<I>-of-<N>[-<hash>] otherwise.
		own := shard.LeaseName(base)
		args = append(args, "--kubeconfig="+kubeconfig, "--log-level=2")
		args = append(args, sc.args...)
		ctrl := env.StartController(t, bin, cv.Binary, args...)
		ctrl.WaitLeadingAndSynced(own, 60*time.Second)
		// It leads with its own Lease, in the release namespace, under its ServiceAccount.
		l, err := admin.CoordinationV1().Leases(release).Get(ctx, own, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
			t.Fatalf("Lease %s/%s: %v %+v", release, own, err, l)
		}
		if len(ctrls) == 0 {
			lease, securePort = own, port
		}
		ctrls = append(ctrls, ctrl)
	}
	ctrl := ctrls[0]

	var scrapes []string
	scrape := func() string {
		code, body := ctrl.Get("/metrics")
		if code != http.StatusOK {
			t.Fatalf("/metrics: %d", code)
		}
		scrapes = append(scrapes, body)
		return body
	}
	sc.run(t, admin, env.Namespace(t), scrape)
	checkSecureServing(t, admin, release, fmt.Sprintf("https://127.0.0.1:%d", securePort))

	// Outside the role: denied, both as an access review and as a real request.
	saClient := clientFor(t, tr.Status.Token)
	forbidden := append([]authorizationv1.ResourceAttributes{
		{Verb: "get", Group: "coordination.k8s.io", Resource: "leases", Namespace: release, Name: "someone-else"},
		{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-system", Name: lease},
		{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: release, Name: "someone-else"},
	}, sc.forbidden...)
	for _, ra := range forbidden {
		ra := ra
		review, err := saClient.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &ra},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("SelfSubjectAccessReview: %v", err)
		}
		if review.Status.Allowed {
			t.Errorf("%s may %s %s/%s %s/%s: outside its role, yet allowed", alias, ra.Verb, ra.Group, ra.Resource, ra.Namespace, ra.Name)
		}
	}
	// The reviews can say yes too: the role's own Lease.
	review, err := saClient.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
			Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: release, Name: lease}},
	}, metav1.CreateOptions{})
	if err != nil || !review.Status.Allowed {
		t.Errorf("its own Lease: not allowed (%v)", err)
	}
	if _, err := saClient.CoreV1().Secrets(release).Get(ctx, "anything", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("reading a Secret with the controller's token: got %v, want Forbidden", err)
	}
	if _, err := saClient.CoordinationV1().Leases(release).Get(ctx, "someone-else", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("reading another Lease with the controller's token: got %v, want Forbidden", err)
	}

	// Every permission granted is used, unless the scenario cannot trigger it.
	granted := grantSet(grants)
	for _, list := range []struct {
		name  string
		perms map[string]string
	}{{"unused", sc.unused}, {"pending", sc.pending}} {
		for perm := range list.perms {
			if !granted[perm] {
				t.Errorf("scenario lists %q as %s, but the role does not grant it", perm, list.name)
			}
		}
	}
	excused := func(perm string) bool { return sc.unused[perm] != "" || sc.pending[perm] != "" }
	var used map[string]bool
	var denied []string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		used, denied = requestsOf(t, user, cv.Binary)
		for perm := range granted {
			if !usedAny(used, perm) && !excused(perm) {
				return false, nil
			}
		}
		return true, nil
	})
	for perm := range granted {
		if !usedAny(used, perm) && !excused(perm) {
			t.Errorf("the role grants %q but %s never used it: drop it, or list it in the scenario's unused with the reason", perm, alias)
		}
	}
	for perm, why := range sc.pending {
		if usedAny(used, perm) {
			t.Errorf("%s now uses %q, listed as pending (%s): remove it from the scenario's pending", alias, perm, why)
		}
	}
	for perm := range used {
		if !coveredByAny(granted, perm) {
			t.Errorf("%s made %q, which its role does not grant", alias, perm)
		}
	}
	if len(denied) > 0 {
		t.Errorf("%s was denied: %v", alias, denied)
	}
	t.Logf("%s used: %v", alias, sortedKeys(used))
	if len(used) == 0 {
		t.Errorf("no request of %s as %s in the audit log (did it run with the ServiceAccount's token?)", alias, user)
	}
	if err != nil {
		t.Logf("waiting for every permission to be used: %v", err)
	}
	for _, ctrl := range ctrls {
		if log, _ := os.ReadFile(ctrl.Log); strings.Contains(string(log), "forbidden") {
			t.Errorf("%s logged a forbidden request:\n%s", alias, grepLines(string(log), "forbidden"))
		}
	}

	_ = scrape()
	return scrapes
}

func mustCreate(t *testing.T, create func() error) {
	t.Helper()
	if err := create(); err != nil {
		t.Fatal(err)
	}
}

func ptr[T any](v T) *T { return &v }

// grantSet flattens rules into "verb group/resource[/subresource]" strings; "*" stays a
// wildcard (see covers).
func grantSet(rules []rbacv1.PolicyRule) map[string]bool {
	out := map[string]bool{}
	for _, r := range rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					out[v+" "+g+"/"+res] = true
				}
			}
		}
	}
	return out
}

// covers reports whether the grant "verb group/resource" allows the request perm, as RBAC
// matches them: "*" as group or resource matches any (resource "*" also subresources).
func covers(grant, perm string) bool {
	gv, gres, _ := strings.Cut(grant, " ")
	pv, pres, _ := strings.Cut(perm, " ")
	if gv != pv && gv != "*" {
		return false
	}
	gg, gr, _ := strings.Cut(gres, "/")
	pg, pr, _ := strings.Cut(pres, "/")
	return (gg == "*" || gg == pg) && (gr == "*" || gr == pr)
}

func coveredByAny(grants map[string]bool, perm string) bool {
	for g := range grants {
		if covers(g, perm) {
			return true
		}
	}
	return false
}

func usedAny(used map[string]bool, grant string) bool {
	for p := range used {
		if covers(grant, p) {
			return true
		}
	}
	return false
}

// requestsOf reads the audit log: the permissions user (with the binary's user agent) used,
// and the requests it was denied.
func requestsOf(t *testing.T, user, binary string) (used map[string]bool, denied []string) {
	t.Helper()
	events, err := env.Audit(func(ev testenv.AuditEvent) bool {
		// A non-resource URL (/api, /apis: discovery) has no resource: every authenticated
		// user may get it through the built-in system:discovery role.
		return ev.User.Username == user && strings.HasPrefix(ev.UserAgent, binary+"/") && ev.ObjectRef.Resource != ""
	})
	if err != nil {
		t.Fatal(err)
	}
	used = map[string]bool{}
	for _, ev := range events {
		res := ev.ObjectRef.APIGroup + "/" + ev.ObjectRef.Resource
		if ev.ObjectRef.Subresource != "" {
			res += "/" + ev.ObjectRef.Subresource
		}
		if ev.ResponseStatus.Code == 403 {
			denied = append(denied, ev.Verb+" "+res+" "+ev.ObjectRef.Namespace+"/"+ev.ObjectRef.Name)
			continue
		}
		used[ev.Verb+" "+res] = true
		// An informer's initial state comes from a streaming watch where the apiserver
		// serves it (client-go's WatchListClient, on against v1.36) and from a list where
		// it does not: a used watch stands for the list the same informer needs elsewhere.
		// Only an informer's: its reflector always asks for bookmarks, while a plain watch
		// (pv-binder's of a recycler Pod's events, as upstream's) needs no list.
		if ev.Verb == "watch" && strings.Contains(ev.RequestURI, "allowWatchBookmarks=true") {
			used["list "+res] = true
		}
	}
	sort.Strings(denied)
	return used, slices.Compact(denied)
}

func clientFor(t *testing.T, token string) kubernetes.Interface {
	t.Helper()
	return kubernetes.NewForConfigOrDie(&rest.Config{
		Host:            env.Host,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		UserAgent:       "charttest",
	})
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// checkSecureServing: over HTTPS, the health paths are open, /metrics refuses a request
// without a token and serves a token allowed to get /metrics. The controller checks that
// token with a TokenReview and a SubjectAccessReview made with its own ServiceAccount, so
// this proves the chart's serving RBAC.
func checkSecureServing(t *testing.T, admin kubernetes.Interface, ns, base string) {
	t.Helper()
	ctx := context.Background()
	sa, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "scraper"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "charttest-scraper-" + ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "system:monitoring"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa.Name, Namespace: ns}},
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.RbacV1().ClusterRoleBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
	})
	tr, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	get := func(path, token string) int {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Logf("GET %s: %v", path, err)
			return 0
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		path, token string
		want        int
	}{
		{"/healthz", "", http.StatusOK},
		{"/readyz", "", http.StatusOK},
		{"/metrics", "", http.StatusUnauthorized},
		{"/metrics", tr.Status.Token, http.StatusOK},
	} {
		// The RoleBinding reaches the authorizer's cache within moments; poll.
		var got int
		_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			got = get(c.path, c.token)
			return got == c.want, nil
		})
		if got != c.want {
			t.Errorf("HTTPS %s (token: %t): %d, want %d", c.path, c.token != "", got, c.want)
		}
	}
}

// The README's story on a real apiserver: install two controllers, scale one, upgrade one
// alone. Every rendered object passes the apiserver's validation, and a change under
// controllers.<alias> leaves the other controller's Deployment untouched.
// Over 80 lines: one release through the README's story (install, scale, upgrade one); the other Deployment's install-time generation checked last.
func TestHelmInstallScaleUpgradeOne(t *testing.T) {
	testenv.Require(t, env)
	c, _ := chart(t)
	ctx := context.Background()
	admin := env.Client(t)
	ns := env.Namespace(t)
	helm := func(args ...string) {
		t.Helper()
		cmd := exec.Command(c.Helm, append(args, "--kubeconfig", env.Kubeconfig, "--namespace", ns)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	deployment := func(name string) *appsv1.Deployment {
		t.Helper()
		d, err := admin.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	const ep, nsc = "kcm-split-endpoints-controller", "kcm-split-namespace-controller"
	helm("install", "kcm-split", c.Dir, "--set", "controllers.endpoints.enabled=true", "--set", "controllers.namespace.enabled=true")
	t.Cleanup(func() {
		_ = exec.Command(c.Helm, "uninstall", "kcm-split", "--kubeconfig", env.Kubeconfig, "--namespace", ns).Run()
	})
	other := deployment(nsc).Generation

	// The Pods would pass the "restricted" Pod Security level: the apiserver's PodSecurity
	// admission judges each Deployment's Pod template (a server-side dry run, in a
	// namespace enforcing restricted; no Pod is created).
	restricted := env.Namespace(t)
	nsObj, err := admin.CoreV1().Namespaces().Get(ctx, restricted, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nsObj.Labels["pod-security.kubernetes.io/enforce"] = "restricted"
	if _, err := admin.CoreV1().Namespaces().Update(ctx, nsObj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{ep, nsc} {
		tmpl := deployment(name).Spec.Template
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: restricted, Labels: tmpl.Labels}, Spec: tmpl.Spec}
		pod.Spec.ServiceAccountName = "" // it lives in the release namespace
		if _, err := admin.CoreV1().Pods(restricted).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Errorf("%s's Pod in a namespace enforcing the restricted Pod Security level: %v", name, err)
		}
	}
	// ... and the check can fail: the same Pod with a writable root file system and root.
	bad := deployment(ep).Spec.Template.DeepCopy()
	bad.Spec.SecurityContext.RunAsNonRoot = nil
	bad.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = nil
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: restricted}, Spec: bad.Spec}
	pod.Spec.ServiceAccountName = ""
	if _, err := admin.CoreV1().Pods(restricted).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err == nil || !strings.Contains(err.Error(), "violates PodSecurity") {
		t.Errorf("a Pod without runAsNonRoot and allowPrivilegeEscalation=false: got %v, want a PodSecurity violation (else the check above proves nothing)", err)
	}
	// The defaults survive a node loss: 2 replicas spread over nodes, a PodDisruptionBudget,
	// system-cluster-critical (which the Priority admission plugin accepted for the Pods above,
	// outside kube-system).
	if d := deployment(ep); *d.Spec.Replicas != 2 || len(d.Spec.Template.Spec.TopologySpreadConstraints) != 1 || d.Spec.Template.Spec.PriorityClassName != "system-cluster-critical" {
		t.Fatalf("installed with %d replicas, spread %+v, priority class %q; want 2, spread over nodes, system-cluster-critical",
			*d.Spec.Replicas, d.Spec.Template.Spec.TopologySpreadConstraints, d.Spec.Template.Spec.PriorityClassName)
	}
	if _, err := admin.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, ep, metav1.GetOptions{}); err != nil {
		t.Errorf("installed with 2 replicas, no PodDisruptionBudget: %v", err)
	}

	// Scaled to one replica, its budget goes (it would block every drain); scaled up, it is back.
	helm("upgrade", "kcm-split", c.Dir, "--reuse-values", "--set", "controllers.endpoints.replicas=1")
	if d := deployment(ep); *d.Spec.Replicas != 1 {
		t.Errorf("scaled down: %d replicas, want 1", *d.Spec.Replicas)
	}
	if _, err := admin.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, ep, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a PodDisruptionBudget for one replica: %v", err)
	}
	if _, err := admin.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, nsc, metav1.GetOptions{}); err != nil {
		t.Errorf("scaling the endpoints controller down removed the namespace controller's PodDisruptionBudget: %v", err)
	}
	helm("upgrade", "kcm-split", c.Dir, "--reuse-values", "--set", "controllers.endpoints.replicas=3")
	if d := deployment(ep); *d.Spec.Replicas != 3 {
		t.Errorf("scaled up: %d replicas, want 3", *d.Spec.Replicas)
	}
	if _, err := admin.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, ep, metav1.GetOptions{}); err != nil {
		t.Errorf("scaled to 3, no PodDisruptionBudget: %v", err)
	}

	before := deployment(ep).Generation
	helm("upgrade", "kcm-split", c.Dir, "--reuse-values", "--set", "controllers.endpoints.image.tag=v9.9.9")
	d := deployment(ep)
	if !strings.HasSuffix(d.Spec.Template.Spec.Containers[0].Image, ":v9.9.9") || d.Generation == before || *d.Spec.Replicas != 3 {
		t.Errorf("upgraded: image %s, generation %d (was %d), replicas %d", d.Spec.Template.Spec.Containers[0].Image, d.Generation, before, *d.Spec.Replicas)
	}
	if got := deployment(nsc).Generation; got != other {
		t.Errorf("scaling and upgrading the endpoints controller changed the namespace controller's Deployment (generation %d, was %d)", got, other)
	}
}
