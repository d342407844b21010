package chart

// Pod options real clusters need (host network, security contexts, extra env and volumes,
// digests, a ServiceAccount of one's own), the ServiceMonitor's authorization, the
// PodDisruptionBudget's eviction policy and the NetworkPolicy: rendered (with -short) and,
// where the apiserver has a say, installed on a real one.

import (
	"context"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"github.com/kcm-split/kcm-split/shared/testenv"
)

const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// podOptionArgs sets every pod option on nodelifecycle (with endpoints enabled beside it
// untouched, to show an option of one controller stays its own).
func podOptionArgs(v *Values) []string {
	args := v.Only("nodelifecycle")
	return append(args,
		"--set", "controllers.endpoints.enabled=true",
		"--set", "controllers.nodelifecycle.hostNetwork=true",
		"--set", "controllers.nodelifecycle.image.digest="+digest,
		"--set", "controllers.nodelifecycle.image.tag=v1.2.3",
		"--set-json", `controllers.nodelifecycle.extraEnv=[{"name":"GODEBUG","value":"http2client=0"}]`,
		"--set-json", `defaults.extraEnv=[{"name":"TZ","value":"UTC"}]`,
		"--set-json", `controllers.nodelifecycle.extraVolumes=[{"name":"extra","configMap":{"name":"extra"}}]`,
		"--set-json", `controllers.nodelifecycle.extraVolumeMounts=[{"name":"extra","mountPath":"/etc/extra","readOnly":true}]`,
		"--set", "serving.tlsSecretName=serving-cert",
	)
}

func deploymentOf(t *testing.T, objs []Object, name string) *appsv1.Deployment {
	t.Helper()
	for _, o := range byKind(objs, "Deployment") {
		if o.Name == name {
			return o.Typed.(*appsv1.Deployment)
		}
	}
	t.Fatalf("no Deployment %s", name)
	return nil
}

func envNames(c corev1.Container) []string {
	var out []string
	for _, e := range c.Env {
		out = append(out, e.Name)
	}
	return out
}

// Over 80 lines: a run of render cases, each a few --set values and the checks on what they render, read top to bottom.
func TestPodOptions(t *testing.T) {
	c, v := chart(t)
	const nl, ep = "kcm-split-nodelifecycle-controller", "kcm-split-endpoints-controller"
	objs := render(t, c, "kcm-split", ns, podOptionArgs(v)...)
	d := deploymentOf(t, objs, nl)
	pod := d.Spec.Template.Spec
	ctr := pod.Containers[0]
	if !pod.HostNetwork || pod.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		t.Errorf("hostNetwork: %t, dnsPolicy %q; want true, ClusterFirstWithHostNet", pod.HostNetwork, pod.DNSPolicy)
	}
	if want := "ghcr.io/kcm-split/nodelifecycle-controller@" + digest; ctr.Image != want {
		t.Errorf("image %q, want %q (the digest wins over the tag)", ctr.Image, want)
	}
	if got := envNames(ctr); !slices.Equal(got, []string{"TZ", "GODEBUG"}) {
		t.Errorf("env %v, want the defaults' TZ then the controller's GODEBUG", got)
	}
	var vols, mounts []string
	for _, vol := range pod.Volumes {
		vols = append(vols, vol.Name)
	}
	for _, m := range ctr.VolumeMounts {
		mounts = append(mounts, m.Name+":"+m.MountPath)
	}
	if !slices.Equal(vols, []string{"serving-tls", "extra"}) || !slices.Equal(mounts, []string{"serving-tls:/etc/kcm-split/tls", "extra:/etc/extra"}) {
		t.Errorf("volumes %v, mounts %v; want the serving Secret's then the extra ones", vols, mounts)
	}
	// Only security-unrelated options were set: the restricted contexts stay.
	checkDeployment(t, d, ControllerValues{Binary: "nodelifecycle-controller", Port: v.Controllers["nodelifecycle"].Port}, ns)

	// The other controller keeps the defaults but the shared env.
	e := deploymentOf(t, objs, ep)
	epod := e.Spec.Template.Spec
	if epod.HostNetwork || epod.DNSPolicy != "" || strings.Contains(epod.Containers[0].Image, "@") || !slices.Equal(envNames(epod.Containers[0]), []string{"TZ"}) || len(epod.Volumes) != 1 {
		t.Errorf("endpoints took nodelifecycle's options: hostNetwork %t, dnsPolicy %q, image %s, env %v, volumes %d",
			epod.HostNetwork, epod.DNSPolicy, epod.Containers[0].Image, envNames(epod.Containers[0]), len(epod.Volumes))
	}

	// dnsPolicy given wins; hostNetwork from the defaults.
	objs = render(t, c, "kcm-split", ns, append(v.Only("endpoints"), "--set", "defaults.hostNetwork=true", "--set", "controllers.endpoints.dnsPolicy=Default")...)
	if p := deploymentOf(t, objs, ep).Spec.Template.Spec; !p.HostNetwork || p.DNSPolicy != corev1.DNSDefault {
		t.Errorf("defaults.hostNetwork with dnsPolicy Default: hostNetwork %t, dnsPolicy %q", p.HostNetwork, p.DNSPolicy)
	}

	// A security context override replaces the defaults' for that controller only.
	objs = render(t, c, "kcm-split", ns, append(v.Only("nodelifecycle"), "--set", "controllers.endpoints.enabled=true",
		"--set-json", `controllers.nodelifecycle.podSecurityContext={"runAsNonRoot":true,"runAsUser":1000,"fsGroup":2000,"seccompProfile":{"type":"RuntimeDefault"}}`,
		"--set-json", `controllers.nodelifecycle.containerSecurityContext={"readOnlyRootFilesystem":false}`)...)
	p := deploymentOf(t, objs, nl).Spec.Template.Spec
	if psc := p.SecurityContext; psc == nil || psc.RunAsUser == nil || *psc.RunAsUser != 1000 || psc.FSGroup == nil || *psc.FSGroup != 2000 || psc.RunAsGroup != nil {
		t.Errorf("pod securityContext override: %+v", psc)
	}
	if sc := p.Containers[0].SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || *sc.ReadOnlyRootFilesystem || sc.Capabilities != nil {
		t.Errorf("container securityContext override: %+v, want it whole (no capabilities)", sc)
	}
	checkDeployment(t, deploymentOf(t, objs, ep), ControllerValues{Binary: "endpoints-controller", Port: v.Controllers["endpoints"].Port}, ns)

	// Bring your own ServiceAccount: not created, and every binding and the Pod use its name.
	objs = render(t, c, "kcm-split", ns, append(v.Only("endpoints"), "--set", "serviceAccount.create=false",
		"--set", "controllers.endpoints.serviceAccountName=my-sa", "--set", "takeOverFromKCM.enabled=true")...)
	if sas := byKind(objs, "ServiceAccount"); len(sas) != 0 {
		t.Errorf("serviceAccount.create=false: %d ServiceAccounts rendered", len(sas))
	}
	if got := deploymentOf(t, objs, ep).Spec.Template.Spec.ServiceAccountName; got != "my-sa" {
		t.Errorf("serviceAccountName %q, want my-sa", got)
	}
	bindings := 0
	for _, o := range objs {
		var subjects []rbacv1.Subject
		switch b := o.Typed.(type) {
		case *rbacv1.RoleBinding:
			subjects = b.Subjects
		case *rbacv1.ClusterRoleBinding:
			subjects = b.Subjects
		default:
			continue
		}
		bindings++
		if len(subjects) != 1 || subjects[0].Name != "my-sa" || subjects[0].Namespace != ns {
			t.Errorf("%s %s binds %+v, want my-sa in %s", o.Kind, o.Name, subjects, ns)
		}
	}
	if bindings < 3 {
		t.Errorf("%d bindings, want the ClusterRoleBinding, the Lease's RoleBinding and the take-over's", bindings)
	}

	// The budget lets a drain evict replicas that are not Ready.
	objs = render(t, c, "kcm-split", ns, v.Only("endpoints")...)
	pdb := byKind(objs, "PodDisruptionBudget")[0].Typed.(*policyv1.PodDisruptionBudget)
	if pdb.Spec.UnhealthyPodEvictionPolicy == nil || *pdb.Spec.UnhealthyPodEvictionPolicy != policyv1.AlwaysAllow {
		t.Errorf("unhealthyPodEvictionPolicy %v, want AlwaysAllow", pdb.Spec.UnhealthyPodEvictionPolicy)
	}
	objs = render(t, c, "kcm-split", ns, append(v.Only("endpoints"), "--set", "podDisruptionBudget.unhealthyPodEvictionPolicy=")...)
	if pdb := byKind(objs, "PodDisruptionBudget")[0].Typed.(*policyv1.PodDisruptionBudget); pdb.Spec.UnhealthyPodEvictionPolicy != nil {
		t.Errorf("unhealthyPodEvictionPolicy empty: rendered %v", *pdb.Spec.UnhealthyPodEvictionPolicy)
	}

	// The schema refuses what the apiserver would.
	for _, tc := range []struct{ set, want string }{
		{"controllers.endpoints.dnsPolicy=ClusterFirstWithHostnet", "/controllers/endpoints/dnsPolicy"},
		{"controllers.endpoints.image.digest=latest", "/controllers/endpoints/image/digest"},
		{"controllers.endpoints.hostNetwork=yes", "/controllers/endpoints/hostNetwork"},
		{"podDisruptionBudget.unhealthyPodEvictionPolicy=Never", "/podDisruptionBudget/unhealthyPodEvictionPolicy"},
		{"serviceAccount.create=no", "/serviceAccount/create"},
		{"controllers.endpoints.serviceAccountName=My_SA", "/controllers/endpoints/serviceAccountName"},
	} {
		if _, err := c.Template("r", ns, "--set", tc.set); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--set %s: got %v, want an error at %s", tc.set, err, tc.want)
		}
	}
	if _, err := c.Template("r", ns, "--set-json", `controllers.endpoints.extraVolumeMounts=[{"name":"x"}]`); err == nil || !strings.Contains(err.Error(), "mountPath") {
		t.Errorf("a volume mount without mountPath: got %v, want a schema error naming mountPath", err)
	}
}

// smEndpoint is what the tests read of a rendered ServiceMonitor.
type smEndpoint struct {
	Spec struct {
		JobLabel  string `json:"jobLabel"`
		Endpoints []struct {
			BearerTokenFile string `json:"bearerTokenFile"`
			HonorLabels     bool   `json:"honorLabels"`
			Authorization   *struct {
				Type        string `json:"type"`
				Credentials struct {
					Name string `json:"name"`
					Key  string `json:"key"`
				} `json:"credentials"`
			} `json:"authorization"`
		} `json:"endpoints"`
	} `json:"spec"`
}

func serviceMonitors(t *testing.T, objs []Object) []smEndpoint {
	t.Helper()
	var out []smEndpoint
	for _, o := range byKind(objs, "ServiceMonitor") {
		var sm smEndpoint
		b, _ := yaml.Marshal(o.Raw)
		if err := yaml.Unmarshal(b, &sm); err != nil {
			t.Fatal(err)
		}
		if len(sm.Spec.Endpoints) != 1 {
			t.Fatalf("ServiceMonitor %s: %d endpoints", o.Name, len(sm.Spec.Endpoints))
		}
		out = append(out, sm)
	}
	return out
}

func TestServiceMonitorAuthorization(t *testing.T) {
	c, v := chart(t)
	base := append(v.Only("endpoints"), "--set", "controllers.quota.enabled=true", "--set", "serviceMonitor.enabled=true",
		"--api-versions", "monitoring.coreos.com/v1/ServiceMonitor")
	const scraper = "kcm-split-metrics-scraper"

	// Default: authorization from the chart's scraper token, which it creates once.
	objs := render(t, c, "kcm-split", ns, base...)
	sms := serviceMonitors(t, objs)
	if len(sms) != 2 {
		t.Fatalf("%d ServiceMonitors, want 2", len(sms))
	}
	for _, sm := range sms {
		ep := sm.Spec.Endpoints[0]
		if ep.BearerTokenFile != "" || ep.Authorization == nil || ep.Authorization.Type != "Bearer" || ep.Authorization.Credentials.Name != scraper || ep.Authorization.Credentials.Key != "token" || ep.HonorLabels || sm.Spec.JobLabel != "" {
			t.Errorf("default endpoint %+v, jobLabel %q: want authorization from %s/token, no bearerTokenFile, no honorLabels", ep, sm.Spec.JobLabel, scraper)
		}
	}
	var secret *corev1.Secret
	for _, o := range byKind(objs, "Secret") {
		secret = o.Typed.(*corev1.Secret)
	}
	if secret == nil || secret.Name != scraper || secret.Type != corev1.SecretTypeServiceAccountToken || secret.Annotations[corev1.ServiceAccountNameKey] != scraper {
		t.Errorf("scraper token Secret: %+v", secret)
	}
	var crb *rbacv1.ClusterRoleBinding
	for _, o := range byKind(objs, "ClusterRoleBinding") {
		if o.Name == scraper {
			crb = o.Typed.(*rbacv1.ClusterRoleBinding)
		}
	}
	if crb == nil || crb.RoleRef.Name != "kcm-split-metrics-reader" || len(crb.Subjects) != 1 || crb.Subjects[0].Name != scraper {
		t.Errorf("scraper binding: %+v, want %s bound to kcm-split-metrics-reader", crb, scraper)
	}
	if n := len(byKind(objs, "ServiceAccount")); n != 3 {
		t.Errorf("%d ServiceAccounts, want one per controller and the scraper", n)
	}

	// Your own Secret: used, nothing created; jobLabel and honorLabels pass through.
	objs = render(t, c, "kcm-split", ns, append(base, "--set", "serviceMonitor.authorization.credentials.name=prom-token",
		"--set", "serviceMonitor.authorization.credentials.key=tok", "--set", "serviceMonitor.jobLabel=app.kubernetes.io/component", "--set", "serviceMonitor.honorLabels=true")...)
	for _, sm := range serviceMonitors(t, objs) {
		ep := sm.Spec.Endpoints[0]
		if ep.Authorization == nil || ep.Authorization.Credentials.Name != "prom-token" || ep.Authorization.Credentials.Key != "tok" || !ep.HonorLabels || sm.Spec.JobLabel != "app.kubernetes.io/component" {
			t.Errorf("own Secret: endpoint %+v, jobLabel %q", ep, sm.Spec.JobLabel)
		}
	}
	if n := len(byKind(objs, "Secret")); n != 0 {
		t.Errorf("own Secret: the chart created %d Secrets", n)
	}

	// The deprecated file, when set, replaces authorization.
	objs = render(t, c, "kcm-split", ns, append(base, "--set", "serviceMonitor.bearerTokenFile=/var/run/secrets/kubernetes.io/serviceaccount/token")...)
	for _, sm := range serviceMonitors(t, objs) {
		if ep := sm.Spec.Endpoints[0]; ep.Authorization != nil || ep.BearerTokenFile == "" {
			t.Errorf("bearerTokenFile set: endpoint %+v", ep)
		}
	}
	if n := len(byKind(objs, "Secret")); n != 0 {
		t.Errorf("bearerTokenFile set: the chart created %d Secrets", n)
	}
	// No ServiceMonitor, no scraper.
	if n := len(byKind(render(t, c, "kcm-split", ns, v.Only("endpoints")...), "Secret")); n != 0 {
		t.Errorf("ServiceMonitors off: %d Secrets", n)
	}
}

func TestNetworkPolicy(t *testing.T) {
	c, v := chart(t)
	if n := len(byKind(render(t, c, "kcm-split", ns, v.Only("endpoints")...), "NetworkPolicy")); n != 0 {
		t.Errorf("off by default, yet %d NetworkPolicies", n)
	}
	objs := render(t, c, "kcm-split", ns, append(v.Only("endpoints"), "--set", "controllers.quota.enabled=true", "--set", "networkPolicy.enabled=true",
		"--set-json", `networkPolicy.metricsFrom=[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}}]`,
		"--set-json", `networkPolicy.apiServer.cidrs=["192.0.2.10/32"]`)...)
	nps := byKind(objs, "NetworkPolicy")
	if len(nps) != 2 {
		t.Fatalf("%d NetworkPolicies, want one per controller", len(nps))
	}
	for _, o := range nps {
		np := o.Typed.(*networkingv1.NetworkPolicy)
		d := deploymentOf(t, objs, o.Name)
		port := d.Spec.Template.Spec.Containers[0].Ports[0]
		if !equalMaps(np.Spec.PodSelector.MatchLabels, d.Spec.Selector.MatchLabels) {
			t.Errorf("%s selects %v, want its Deployment's %v", o.Name, np.Spec.PodSelector.MatchLabels, d.Spec.Selector.MatchLabels)
		}
		if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}) {
			t.Errorf("%s policyTypes %v", o.Name, np.Spec.PolicyTypes)
		}
		in := np.Spec.Ingress
		// From the monitoring namespace, and from the controller's helm test Pod (helmTest.enabled).
		testPod := d.Spec.Selector.MatchLabels["app.kubernetes.io/component"] + "-test"
		if len(in) != 1 || len(in[0].Ports) != 1 || in[0].Ports[0].Port.String() != port.Name || len(in[0].From) != 2 || in[0].From[0].NamespaceSelector == nil ||
			in[0].From[1].PodSelector == nil || in[0].From[1].NamespaceSelector != nil || in[0].From[1].PodSelector.MatchLabels["app.kubernetes.io/component"] != testPod {
			t.Errorf("%s ingress %+v: want only port %s from the monitoring namespace and its test Pod %s", o.Name, in, port.Name, testPod)
		}
		eg := np.Spec.Egress
		if len(eg) != 1 || len(eg[0].Ports) != 2 || eg[0].Ports[0].Port.IntValue() != 443 || eg[0].Ports[1].Port.IntValue() != 6443 ||
			len(eg[0].To) != 1 || eg[0].To[0].IPBlock == nil || eg[0].To[0].IPBlock.CIDR != "192.0.2.10/32" {
			t.Errorf("%s egress %+v: want only 443 and 6443 to 192.0.2.10/32", o.Name, eg)
		}
	}
}

// On a real kube-apiserver: an install with every option accepted by the apiserver's
// validation (a bring-your-own ServiceAccount, host network, digest, extra volumes, the
// NetworkPolicy and the budget's eviction policy); the ServiceAccount of one's own holds its
// Lease through the chart's RBAC; and the chart's scraper token may get /metrics and nothing
// else.
// Over 80 lines: one release installed on the shared apiserver, then its stored objects, its RBAC and the scraper's token checked against it in turn.
func TestPodOptionsOnRealAPIServer(t *testing.T) {
	testenv.Require(t, env)
	c, v := chart(t)
	ctx := context.Background()
	admin := env.Client(t)
	ns := env.Namespace(t)
	if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "my-sa"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	release := "opts" + ns[len(ns)-5:]
	args := append([]string{"install", release, c.Dir, "--kubeconfig", env.Kubeconfig, "--namespace", ns,
		"--set", "serviceAccount.create=false", "--set", "controllers.nodelifecycle.serviceAccountName=my-sa",
		"--set", "controllers.endpoints.serviceAccountName=my-sa", "--set", "networkPolicy.enabled=true"}, podOptionArgs(v)...)
	if out, err := exec.Command(c.Helm, args...).CombinedOutput(); err != nil {
		t.Fatalf("helm install: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		_ = exec.Command(c.Helm, "uninstall", release, "--kubeconfig", env.Kubeconfig, "--namespace", ns).Run()
	})
	name := release + "-kcm-split-nodelifecycle-controller"
	d, err := admin.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p := d.Spec.Template.Spec; !p.HostNetwork || p.ServiceAccountName != "my-sa" || !strings.HasSuffix(p.Containers[0].Image, "@"+digest) {
		t.Errorf("stored Deployment: hostNetwork %t, serviceAccountName %q, image %s", p.HostNetwork, p.ServiceAccountName, p.Containers[0].Image)
	}
	pdb, err := admin.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil || pdb.Spec.UnhealthyPodEvictionPolicy == nil || *pdb.Spec.UnhealthyPodEvictionPolicy != policyv1.AlwaysAllow {
		t.Errorf("stored PodDisruptionBudget: %v %+v", err, pdb)
	}
	if _, err := admin.NetworkingV1().NetworkPolicies(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
		t.Errorf("NetworkPolicy: %v", err)
	}
	if sas, err := admin.CoreV1().ServiceAccounts(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + release}); err != nil || len(sas.Items) != 0 {
		t.Errorf("serviceAccount.create=false: %v, %d ServiceAccounts created", err, len(sas.Items))
	}
	// The chart's RBAC reaches the ServiceAccount of one's own: it may update its Lease.
	sar := func(user string, ra *authorizationv1.ResourceAttributes, nra *authorizationv1.NonResourceAttributes) bool {
		t.Helper()
		var allowed bool
		// A new binding reaches the authorizer's cache within moments: poll for the final
		// answer only when it is "allowed"; a denial is checked after the allowances held.
		_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 15*time.Second, true, func(context.Context) (bool, error) {
			r, err := admin.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: user, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
				ResourceAttributes: ra, NonResourceAttributes: nra}}, metav1.CreateOptions{})
			if err != nil {
				return false, err
			}
			allowed = r.Status.Allowed
			return allowed, nil
		})
		return allowed
	}
	mySA := "system:serviceaccount:" + ns + ":my-sa"
	if !sar(mySA, &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Name: "nodelifecycle-controller"}, nil) {
		t.Errorf("my-sa may not update its Lease: the chart's RBAC is not bound to it")
	}

	// The scraper token (the ServiceMonitor's default authorization): a TokenRequest for the
	// chart's scraper ServiceAccount stands for the Secret's token (same subject).
	out, err := exec.Command(c.Helm, "template", release, c.Dir, "--namespace", ns, "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor",
		"--set", "controllers.endpoints.enabled=true", "--set", "serviceMonitor.enabled=true", "--show-only", "templates/metrics-scraper.yaml").Output() // stdout only: helm logs to stderr
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	objs, err := Decode(out)
	if err != nil {
		t.Fatal(err)
	}
	scraper := release + "-kcm-split-metrics-scraper"
	for _, o := range objs {
		switch x := o.Typed.(type) {
		case *corev1.ServiceAccount:
			_, err = admin.CoreV1().ServiceAccounts(ns).Create(ctx, x, metav1.CreateOptions{})
		case *corev1.Secret:
			_, err = admin.CoreV1().Secrets(ns).Create(ctx, x, metav1.CreateOptions{})
		case *rbacv1.ClusterRoleBinding:
			_, err = admin.RbacV1().ClusterRoleBindings().Create(ctx, x, metav1.CreateOptions{})
			t.Cleanup(func() {
				_ = admin.RbacV1().ClusterRoleBindings().Delete(context.Background(), x.Name, metav1.DeleteOptions{})
			})
		default:
			t.Fatalf("metrics-scraper.yaml renders a %s", o.Kind)
		}
		if err != nil {
			t.Fatalf("creating %s %s: %v", o.Kind, o.Name, err)
		}
	}
	if len(objs) != 3 {
		t.Fatalf("metrics-scraper.yaml rendered %d objects, want a ServiceAccount, its token Secret and its binding", len(objs))
	}
	tr, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, scraper, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	review, err := admin.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: tr.Status.Token}}, metav1.CreateOptions{})
	if err != nil || !review.Status.Authenticated {
		t.Fatalf("the scraper's token does not authenticate: %v %+v", err, review.Status)
	}
	user := review.Status.User.Username
	if !sar(user, nil, &authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"}) {
		t.Errorf("%s may not get /metrics", user)
	}
	for _, ra := range []authorizationv1.ResourceAttributes{
		{Namespace: ns, Verb: "get", Resource: "secrets"},
		{Namespace: ns, Verb: "list", Resource: "pods"},
		{Namespace: ns, Verb: "get", Group: "coordination.k8s.io", Resource: "leases"},
	} {
		r, err := admin.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user, Groups: review.Status.User.Groups, ResourceAttributes: &ra}}, metav1.CreateOptions{})
		if err != nil || r.Status.Allowed {
			t.Errorf("the scraper may %s %s: %v", ra.Verb, ra.Resource, err)
		}
	}
}
