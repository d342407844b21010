package chart

// Render checks of `helm test` (templates/tests): one test Pod per enabled controller running the
// controller's own image with its `check` subcommand against the controller's Service and
// Leases, under a Role that can get exactly those Leases.

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/labels"
)

// renderWithTests is render with the helm test hooks (what `helm test` creates, too).
func renderWithTests(t *testing.T, c *Chart, args ...string) []Object {
	t.Helper()
	return templateObjects(t, c, "kcm-split", ns, args...)
}

// testHooks are the objects annotated helm.sh/hook: test, by kind; it fails on a test hook
// without the delete policy that cleans up before a rerun and after success.
func testHooks(t *testing.T, objs []Object) map[string][]Object {
	t.Helper()
	out := map[string][]Object{}
	for _, o := range objs {
		meta, _ := o.Raw["metadata"].(map[string]any)
		ann, _ := meta["annotations"].(map[string]any)
		if ann["helm.sh/hook"] != "test" {
			continue
		}
		if ann["helm.sh/hook-delete-policy"] != "before-hook-creation,hook-succeeded" {
			t.Errorf("%s %s: hook-delete-policy %v", o.Kind, o.Name, ann["helm.sh/hook-delete-policy"])
		}
		// The Pod runs last: its ServiceAccount, Role and binding exist when it starts.
		want := "-1"
		if o.Kind == "Pod" {
			want = "0"
		}
		if ann["helm.sh/hook-weight"] != want {
			t.Errorf("%s %s: hook-weight %v, want %s", o.Kind, o.Name, ann["helm.sh/hook-weight"], want)
		}
		out[o.Kind] = append(out[o.Kind], o)
	}
	return out
}

func argValues(args []string, flag string) []string {
	var out []string
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+flag+"="); ok {
			out = append(out, v)
		}
	}
	return out
}

// checkTestPod asserts the test objects of one controller against its rendered Deployment and
// Service; leases are the Lease names the test must check.
// Over 80 lines: a flat list of assertions on one controller's test Pod, Role and RoleBinding against the Deployment and Service found at its top.
func checkTestPod(t *testing.T, objs []Object, hooks map[string][]Object, binary string, leases []string) {
	t.Helper()
	name := "kcm-split-" + binary
	test := name + "-test"
	d := deploymentOf(t, objs, name)
	var svc *corev1.Service
	for _, o := range byKind(objs, "Service") {
		if o.Name == name {
			svc = o.Typed.(*corev1.Service)
		}
	}
	if svc == nil {
		t.Fatalf("no Service %s", name)
	}
	var pod *corev1.Pod
	for _, o := range hooks["Pod"] {
		if o.Name == test {
			pod = o.Typed.(*corev1.Pod)
		}
	}
	if pod == nil {
		t.Fatalf("no test Pod %s", test)
	}
	ctr := d.Spec.Template.Spec.Containers[0]
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("test Pod %s: %d containers", test, len(pod.Spec.Containers))
	}
	tc := pod.Spec.Containers[0]
	if tc.Image != ctr.Image || tc.ImagePullPolicy != ctr.ImagePullPolicy || len(tc.Command) != 0 {
		t.Errorf("test Pod %s: image %s (%s), command %v; want the controller's %s (%s) and its entrypoint", test, tc.Image, tc.ImagePullPolicy, tc.Command, ctr.Image, ctr.ImagePullPolicy)
	}
	if len(tc.Args) == 0 || tc.Args[0] != "check" {
		t.Fatalf("test Pod %s: args %v, want the check subcommand", test, tc.Args)
	}
	// The Service's port, its name for TLS, its address from the Service's environment variable.
	wantURL := fmt.Sprintf("https://%s.%s.svc:%d/readyz", name, ns, svc.Spec.Ports[0].Port)
	if got := argValues(tc.Args, "readyz-url"); !slices.Equal(got, []string{wantURL}) || svc.Spec.Ports[0].TargetPort.String() != ctr.Ports[0].Name {
		t.Errorf("test Pod %s: --readyz-url %v, want %s (Service port %d -> %s)", test, got, wantURL, svc.Spec.Ports[0].Port, svc.Spec.Ports[0].TargetPort.String())
	}
	env := strings.ToUpper(strings.ReplaceAll(name, "-", "_")) + "_SERVICE_HOST"
	if got := argValues(tc.Args, "readyz-address"); !slices.Equal(got, []string{"$(" + env + ")"}) || pod.Spec.EnableServiceLinks == nil || !*pod.Spec.EnableServiceLinks {
		t.Errorf("test Pod %s: --readyz-address %v, enableServiceLinks %v; want $(%s) from the Service links", test, got, pod.Spec.EnableServiceLinks, env)
	}
	if got := argValues(tc.Args, "lease-namespace"); !slices.Equal(got, []string{ns}) {
		t.Errorf("test Pod %s: --lease-namespace %v, want %s", test, got, ns)
	}
	if got := argValues(tc.Args, "lease"); !slices.Equal(got, leases) {
		t.Errorf("test Pod %s: --lease %v, want %v", test, got, leases)
	}
	// The controller elects on exactly those Leases.
	if got := argValues(ctr.Args, "leader-elect-resource-name"); len(leases) != 1 || !slices.Equal(got, leases) {
		t.Errorf("controller %s elects on %v, its test checks %v", name, got, leases)
	}
	// Restricted like the controller, placed like it, never selected as one of its replicas.
	if !equality.Semantic.DeepEqual(pod.Spec.SecurityContext, d.Spec.Template.Spec.SecurityContext) || !equality.Semantic.DeepEqual(tc.SecurityContext, ctr.SecurityContext) {
		t.Errorf("test Pod %s: security contexts %+v / %+v, want the controller's", test, pod.Spec.SecurityContext, tc.SecurityContext)
	}
	if !equalMaps(pod.Spec.NodeSelector, d.Spec.Template.Spec.NodeSelector) || !equality.Semantic.DeepEqual(pod.Spec.Tolerations, d.Spec.Template.Spec.Tolerations) {
		t.Errorf("test Pod %s: nodeSelector %v tolerations %v, want the controller's", test, pod.Spec.NodeSelector, pod.Spec.Tolerations)
	}
	if pod.Spec.RestartPolicy != corev1.RestartPolicyNever || pod.Spec.ServiceAccountName != test {
		t.Errorf("test Pod %s: restartPolicy %s, serviceAccountName %s", test, pod.Spec.RestartPolicy, pod.Spec.ServiceAccountName)
	}
	podLabels := labels.Set(pod.Labels)
	for _, sel := range []map[string]string{d.Spec.Selector.MatchLabels, svc.Spec.Selector} {
		if labels.SelectorFromSet(sel).Matches(podLabels) {
			t.Errorf("test Pod %s (labels %v) is selected by the controller's selector %v", test, pod.Labels, sel)
		}
	}
	if tc.Resources.Requests.Cpu().IsZero() || tc.Resources.Limits.Memory().IsZero() {
		t.Errorf("test Pod %s: resources %+v", test, tc.Resources)
	}

	// Its ServiceAccount may get exactly the controller's Leases, nothing else.
	var role *rbacv1.Role
	for _, o := range hooks["Role"] {
		if o.Name == test {
			role = o.Typed.(*rbacv1.Role)
		}
	}
	want := []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: leases, Verbs: []string{"get"}}}
	if role == nil || role.Namespace != ns || !equality.Semantic.DeepEqual(role.Rules, want) {
		t.Errorf("test Role %s: %+v, want in %s exactly %+v", test, role, ns, want)
	}
	var rb *rbacv1.RoleBinding
	for _, o := range hooks["RoleBinding"] {
		if o.Name == test {
			rb = o.Typed.(*rbacv1.RoleBinding)
		}
	}
	if rb == nil || rb.RoleRef.Kind != "Role" || rb.RoleRef.Name != test || len(rb.Subjects) != 1 || rb.Subjects[0].Kind != "ServiceAccount" || rb.Subjects[0].Name != test || rb.Subjects[0].Namespace != ns {
		t.Errorf("test RoleBinding %s: %+v, want Role %s bound to ServiceAccount %s/%s", test, rb, test, ns, test)
	}
	if !slices.ContainsFunc(hooks["ServiceAccount"], func(o Object) bool { return o.Name == test && o.Namespace == ns }) {
		t.Errorf("no test ServiceAccount %s/%s", ns, test)
	}
}

func TestHelmTestPods(t *testing.T) {
	c, v := chart(t)
	// Each controller alone: its four test objects, nothing of the others'.
	for _, alias := range v.Aliases() {
		t.Run(alias, func(t *testing.T) {
			binary := v.Controllers[alias].Binary
			objs := renderWithTests(t, c, v.Only(alias)...)
			hooks := testHooks(t, objs)
			for kind, want := range map[string]int{"Pod": 1, "ServiceAccount": 1, "Role": 1, "RoleBinding": 1, "NetworkPolicy": 0} {
				if len(hooks[kind]) != want {
					t.Errorf("%d test %ss, want %d", len(hooks[kind]), kind, want)
				}
			}
			checkTestPod(t, objs, hooks, binary, []string{binary})
		})
	}

	// Every controller: one test Pod each.
	var all []string
	for _, a := range v.Aliases() {
		all = append(all, "--set", "controllers."+a+".enabled=true")
	}
	objs := renderWithTests(t, c, all...)
	hooks := testHooks(t, objs)
	if len(hooks["Pod"]) != len(v.Aliases()) {
		t.Errorf("every controller: %d test Pods, want %d", len(hooks["Pod"]), len(v.Aliases()))
	}
	for _, a := range v.Aliases() {
		checkTestPod(t, objs, hooks, v.Controllers[a].Binary, []string{v.Controllers[a].Binary})
	}

	// Off: no hook at all; the release's own objects are the same.
	off := renderWithTests(t, c, append(slices.Clone(all), "--set", "helmTest.enabled=false")...)
	if h := testHooks(t, off); len(h) != 0 {
		t.Errorf("helmTest.enabled=false: test hooks %v", h)
	}
	if len(off) != len(objs)-4*len(v.Aliases()) {
		t.Errorf("helmTest.enabled=false: %d objects, want %d (%d less four test objects per controller)", len(off), len(objs)-4*len(v.Aliases()), len(objs))
	}

	// A Lease name of one's own, an image by digest, a nodeSelector: the test follows the controller.
	digest := "sha256:" + strings.Repeat("ab", 32)
	objs = renderWithTests(t, c, append(v.Only("quota"), "--set", "controllers.quota.leaseName=my-quota-lease",
		"--set", "controllers.quota.image.digest="+digest, "--set", "defaults.nodeSelector.type=real")...)
	hooks = testHooks(t, objs)
	checkTestPod(t, objs, hooks, v.Controllers["quota"].Binary, []string{"my-quota-lease"})
	if img := hooks["Pod"][0].Typed.(*corev1.Pod).Spec.Containers[0].Image; !strings.HasSuffix(img, "@"+digest) {
		t.Errorf("image digest: test Pod runs %s", img)
	}
}

// With the NetworkPolicies on, the test Pod still reaches /readyz: the controller's policy
// admits it (when metricsFrom narrows the sources), and its own lets it out to the controller's
// port and the apiserver only.
func TestHelmTestNetworkPolicy(t *testing.T) {
	c, v := chart(t)
	binary := v.Controllers["endpoints"].Binary
	name := "kcm-split-" + binary
	objs := renderWithTests(t, c, append(v.Only("endpoints"), "--set", "networkPolicy.enabled=true",
		"--set-json", `networkPolicy.metricsFrom=[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}}]`,
		"--set-json", `networkPolicy.apiServer.cidrs=["192.0.2.10/32"]`)...)
	hooks := testHooks(t, objs)
	if len(hooks["NetworkPolicy"]) != 1 {
		t.Fatalf("%d test NetworkPolicies, want 1", len(hooks["NetworkPolicy"]))
	}
	pod := hooks["Pod"][0].Typed.(*corev1.Pod)
	d := deploymentOf(t, objs, name)
	var own *networkingv1.NetworkPolicy
	for _, o := range byKind(objs, "NetworkPolicy") {
		if o.Name == name {
			own = o.Typed.(*networkingv1.NetworkPolicy)
		}
	}
	admits := func(np *networkingv1.NetworkPolicy) bool {
		for _, from := range np.Spec.Ingress[0].From {
			if from.PodSelector != nil && from.NamespaceSelector == nil && labels.SelectorFromSet(from.PodSelector.MatchLabels).Matches(labels.Set(pod.Labels)) {
				return true
			}
		}
		return false
	}
	if own == nil || !admits(own) {
		t.Errorf("the controller's NetworkPolicy %+v does not admit the test Pod %v", own, pod.Labels)
	}
	np := hooks["NetworkPolicy"][0].Typed.(*networkingv1.NetworkPolicy)
	port := d.Spec.Template.Spec.Containers[0].Ports[0].ContainerPort
	eg := np.Spec.Egress
	if !labels.SelectorFromSet(np.Spec.PodSelector.MatchLabels).Matches(labels.Set(pod.Labels)) || len(np.Spec.Ingress) != 0 ||
		!slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}) ||
		len(eg) != 2 || len(eg[0].Ports) != 1 || eg[0].Ports[0].Port.IntValue() != int(port) || len(eg[0].To) != 1 || eg[0].To[0].PodSelector == nil ||
		!equalMaps(eg[0].To[0].PodSelector.MatchLabels, d.Spec.Selector.MatchLabels) ||
		len(eg[1].To) != 1 || eg[1].To[0].IPBlock == nil || eg[1].To[0].IPBlock.CIDR != "192.0.2.10/32" {
		t.Errorf("test NetworkPolicy %+v: want the test Pod, no ingress, egress to port %d of the controller's Pods and to the apiserver", np.Spec, port)
	}

	// Without helm test, the controller's policy admits only metricsFrom.
	objs = renderWithTests(t, c, append(v.Only("endpoints"), "--set", "networkPolicy.enabled=true", "--set", "helmTest.enabled=false",
		"--set-json", `networkPolicy.metricsFrom=[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}}]`)...)
	for _, o := range byKind(objs, "NetworkPolicy") {
		if n := len(o.Typed.(*networkingv1.NetworkPolicy).Spec.Ingress[0].From); n != 1 {
			t.Errorf("helmTest.enabled=false: NetworkPolicy %s admits %d peers, want metricsFrom's 1", o.Name, n)
		}
	}
}
