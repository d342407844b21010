package charttest

// The RBAC proof: each controller's RBAC, rendered by the chart, is applied to a real
// kube-apiserver (RBAC authorization on); the controller binary runs with its
// ServiceAccount's token (TokenRequest) and the command line the chart renders. The test
// shows that its scenario succeeds, that it was never denied anything, that every permission
// it holds was used (or is listed below with the reason the scenario cannot trigger it), and
// that requests outside its role are forbidden.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
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
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kcm-split/kcm-split/shared/testenv"
)

// scenario is one controller's part of the RBAC test.
type scenario struct {
	// run exercises the controller as its own integration tests do; admin is an admin
	// client, ns a fresh namespace for the test's objects.
	run func(t *testing.T, admin kubernetes.Interface, ns string)
	// forbidden are requests outside the role; each must be denied.
	forbidden []authorizationv1.ResourceAttributes
	// unused are permissions (verb group/resource) the role grants that the scenario cannot
	// make the controller use, with the reason.
	unused map[string]string
	// args are test-only flags, appended to the chart's command line.
	args []string
}

var scenarios = map[string]scenario{
	"endpoints": {
		run: endpointsScenario,
		forbidden: []authorizationv1.ResourceAttributes{
			{Verb: "list", Resource: "secrets"},
			{Verb: "update", Resource: "services"},
			{Verb: "get", Resource: "endpoints"},
			{Verb: "create", Group: "discovery.k8s.io", Resource: "endpointslices"},
			{Verb: "update", Resource: "pods", Subresource: "status"},
		},
		unused: map[string]string{
			"create /events": "an Event is written only when an Endpoints write fails",
			"patch /events":  "only a repeated Event is patched",
		},
	},
}

func TestControllersUnderChartRBAC(t *testing.T) {
	testenv.Require(t, env)
	c, v := chart(t)
	families := map[string]map[string]bool{} // metric family -> binaries exporting it
	for _, alias := range v.Aliases() {
		t.Run(alias, func(t *testing.T) {
			sc, ok := scenarios[alias]
			if !ok {
				t.Fatalf("no RBAC scenario for controller %s: add one to scenarios", alias)
			}
			body := runUnderChartRBAC(t, c, v, alias, sc)
			fams, err := Families(body)
			if err != nil {
				t.Fatalf("parsing /metrics: %v", err)
			}
			checkDashboardMetrics(t, filepath.Join(c.Dir, "dashboards", alias+".json"), fams)
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
		all := map[string]bool{}
		for name := range families {
			all[name] = true
		}
		d, err := LoadDashboard(filepath.Join(c.Dir, "dashboards", "overview.json"))
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range d.Queries {
			names, err := MetricNames(q.Expr)
			if err != nil {
				t.Errorf("%s: %v", q.Where, err)
				continue
			}
			for _, n := range names {
				if !Synthetic[n] && !exportedByAny(n, families) {
					t.Errorf("overview %s queries %s, which no controller binary exports", q.Where, n)
				}
			}
		}
	})
}

func exportedByAny(name string, families map[string]map[string]bool) bool {
	for fam := range families {
		if name == fam || strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count") == fam {
			return true
		}
	}
	return false
}

// runUnderChartRBAC runs alias under the chart's RBAC and returns its /metrics after the
// scenario.
func runUnderChartRBAC(t *testing.T, c *Chart, v *Values, alias string, sc scenario) string {
	ctx := context.Background()
	admin := env.Client(t)
	cv := v.Controllers[alias]
	release := env.Namespace(t) // the release namespace: ServiceAccount, Role, Lease
	objs := render(t, c, "ct-"+alias, release, v.Only(alias)...)

	var (
		sa     *corev1.ServiceAccount
		dep    *appsv1.Deployment
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
				_, err := admin.RbacV1().Roles(release).Create(ctx, obj, metav1.CreateOptions{})
				return err
			})
		case *rbacv1.RoleBinding:
			mustCreate(t, func() error {
				_, err := admin.RbacV1().RoleBindings(release).Create(ctx, obj, metav1.CreateOptions{})
				return err
			})
		case *appsv1.Deployment:
			dep = obj
		}
	}
	if sa == nil || dep == nil || len(grants) == 0 {
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
	writeKubeconfig(t, kubeconfig, env.Host, tr.Status.Token)
	user := fmt.Sprintf("system:serviceaccount:%s:%s", release, sa.Name)

	// The chart's command line, but serving on the free port StartController picked.
	var args []string
	for _, a := range dep.Spec.Template.Spec.Containers[0].Args {
		if strings.HasPrefix(a, "--metrics-bind-address=") {
			continue
		}
		if name, ok := strings.CutPrefix(a, "--leader-elect-resource-name="); ok {
			lease = name
		}
		args = append(args, a)
	}
	args = append(args, "--kubeconfig="+kubeconfig, "--log-level=2")
	args = append(args, sc.args...)
	bin := buildBinary(t, alias, cv.Binary)
	ctrl := env.StartController(t, bin, cv.Binary, args...)
	ctrl.WaitLeadingAndSynced(lease, 60*time.Second)

	// It leads with its own Lease, in the release namespace, under its ServiceAccount.
	l, err := admin.CoordinationV1().Leases(release).Get(ctx, lease, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
		t.Fatalf("Lease %s/%s: %v %+v", release, lease, err, l)
	}

	sc.run(t, admin, env.Namespace(t))

	// Outside the role: denied, both as an access review and as a real request.
	saClient := clientFor(t, tr.Status.Token)
	forbidden := append([]authorizationv1.ResourceAttributes{
		{Verb: "get", Group: "coordination.k8s.io", Resource: "leases", Namespace: release, Name: "someone-else"},
		{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-system", Name: lease},
		{Verb: "delete", Group: "coordination.k8s.io", Resource: "leases", Namespace: release, Name: lease},
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
	if _, err := saClient.CoreV1().Secrets("").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("listing Secrets with the controller's token: got %v, want Forbidden", err)
	}
	if _, err := saClient.CoordinationV1().Leases(release).Get(ctx, "someone-else", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("reading another Lease with the controller's token: got %v, want Forbidden", err)
	}

	// Every permission granted is used, unless the scenario cannot trigger it.
	granted := grantSet(grants)
	for perm := range sc.unused {
		if !granted[perm] {
			t.Errorf("scenario lists %q as unused, but the role does not grant it", perm)
		}
	}
	var used map[string]bool
	var denied []string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		used, denied = requestsOf(t, user, cv.Binary)
		for perm := range granted {
			if !used[perm] && sc.unused[perm] == "" {
				return false, nil
			}
		}
		return true, nil
	})
	for perm := range granted {
		if !used[perm] && sc.unused[perm] == "" {
			t.Errorf("the role grants %q but %s never used it: drop it, or list it in the scenario's unused with the reason", perm, alias)
		}
	}
	for perm := range used {
		if !granted[perm] {
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
	if log, _ := os.ReadFile(ctrl.Log); strings.Contains(string(log), "forbidden") {
		t.Errorf("%s logged a forbidden request:\n%s", alias, grepLines(string(log), "forbidden"))
	}

	code, body := ctrl.Get("/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	return body
}

func mustCreate(t *testing.T, create func() error) {
	t.Helper()
	if err := create(); err != nil {
		t.Fatal(err)
	}
}

func ptr[T any](v T) *T { return &v }

// grantSet flattens rules into "verb group/resource[/subresource]" strings.
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

type auditEvent struct {
	Verb      string `json:"verb"`
	UserAgent string `json:"userAgent"`
	User      struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef struct {
		APIGroup    string `json:"apiGroup"`
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
}

// requestsOf reads the audit log: the permissions user (with the binary's user agent) used,
// and the requests it was denied.
func requestsOf(t *testing.T, user, binary string) (used map[string]bool, denied []string) {
	t.Helper()
	f, err := os.Open(filepath.Join(env.Dir, "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	used = map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev auditEvent
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.User.Username != user || !strings.HasPrefix(ev.UserAgent, binary+"/") {
			continue
		}
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
		if ev.Verb == "watch" {
			used["list "+res] = true
		}
	}
	sort.Strings(denied)
	return used, slices.Compact(denied)
}

func writeKubeconfig(t *testing.T, path, host, token string) {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["testenv"] = &clientcmdapi.Cluster{Server: host, InsecureSkipTLSVerify: true}
	cfg.AuthInfos["controller"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["testenv"] = &clientcmdapi.Context{Cluster: "testenv", AuthInfo: "controller"}
	cfg.CurrentContext = "testenv"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
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
