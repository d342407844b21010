package chart

// Render checks: what `helm template` produces for each controller alone, all of them, none,
// and with bad values. They need bin/helm only (no control plane), so they also run with -short.

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

const ns = "kcm-system"

func byKind(objs []Object, kind string) []Object {
	var out []Object
	for _, o := range objs {
		if o.Kind == kind {
			out = append(out, o)
		}
	}
	return out
}

// noExecute300 is the chart's default toleration of any NoExecute taint (noexecute_test.go).
var noExecute300 = corev1.Toleration{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr(int64(300))}

func TestEachControllerAlone(t *testing.T) {
	c, v := chart(t)
	for _, alias := range v.Aliases() {
		t.Run(alias, func(t *testing.T) {
			cv := v.Controllers[alias]
			name := "kcm-split-" + cv.Binary
			objs := render(t, c, "kcm-split", ns, v.Only(alias)...)
			kinds := map[string][]string{}
			for _, o := range objs {
				kinds[o.Kind] = append(kinds[o.Kind], o.Name)
			}
			for _, kind := range []string{"Deployment", "ServiceAccount", "Service", "ClusterRole", "ClusterRoleBinding"} {
				want := []string{name}
				if kind == "ClusterRole" {
					// Plus the role a scraper is bound to: get on /metrics, nothing else.
					want = []string{"kcm-split-metrics-reader", name}
				}
				if got := kinds[kind]; !slices.Equal(got, want) {
					t.Errorf("%s: got %v, want exactly %v", kind, got, want)
				}
			}
			// A Role for its Lease in the release namespace, and one per other namespace
			// its RBAC file names; all of the controller's name.
			for _, kind := range []string{"Role", "RoleBinding"} {
				inRelease := 0
				for _, o := range byKind(objs, kind) {
					if o.Name != name {
						t.Errorf("%s %s/%s: want the name %s", kind, o.Namespace, o.Name, name)
					}
					if o.Namespace == ns {
						inRelease++
					}
				}
				if inRelease != 1 {
					t.Errorf("%d %ss in the release namespace, want 1", inRelease, kind)
				}
			}
			if got := kinds["ConfigMap"]; !slices.Equal(got, []string{name + "-dashboard", "kcm-split-overview-dashboard"}) {
				t.Errorf("dashboard ConfigMaps: got %v", got)
			}
			if len(kinds["ServiceMonitor"]) > 0 {
				t.Errorf("ServiceMonitor rendered by default: %v", kinds["ServiceMonitor"])
			}
			d := byKind(objs, "Deployment")[0].Typed.(*appsv1.Deployment)
			checkDeployment(t, d, cv, ns)

			// By default two replicas survive a node: spread over nodes, evicted one at a
			// time (a PodDisruptionBudget selecting exactly this controller), and scheduled
			// with kube-controller-manager's priority.
			pdbs := byKind(objs, "PodDisruptionBudget")
			if len(pdbs) != 1 {
				t.Fatalf("defaults: %d PodDisruptionBudgets, want 1", len(pdbs))
			}
			pdb := pdbs[0].Typed.(*policyv1.PodDisruptionBudget)
			if *d.Spec.Replicas != 2 || !equalMaps(pdb.Spec.Selector.MatchLabels, d.Spec.Selector.MatchLabels) || pdb.Spec.MaxUnavailable.IntValue() != 1 {
				t.Errorf("defaults: deployment replicas %d, PDB selector %v (deployment's %v), maxUnavailable %v", *d.Spec.Replicas, pdb.Spec.Selector.MatchLabels, d.Spec.Selector.MatchLabels, pdb.Spec.MaxUnavailable)
			}
			pod := d.Spec.Template.Spec
			checkSpread(t, pod, d, corev1.ScheduleAnyway)
			if pod.PriorityClassName != "system-cluster-critical" {
				t.Errorf("defaults: priorityClassName %q, want system-cluster-critical", pod.PriorityClassName)
			}
			// Off by default: no placement on control-plane nodes, no anti-affinity on top of
			// the spread; the one toleration is of any NoExecute taint, for 300 s.
			if len(pod.NodeSelector) > 0 || !reflect.DeepEqual(pod.Tolerations, []corev1.Toleration{noExecute300}) || pod.Affinity != nil {
				t.Errorf("defaults: nodeSelector %v, tolerations %+v, affinity %+v; want none but a NoExecute toleration of 300s", pod.NodeSelector, pod.Tolerations, pod.Affinity)
			}

			// One replica: no PodDisruptionBudget (it would block every drain).
			objs = render(t, c, "kcm-split", ns, append(v.Only(alias), "--set", fmt.Sprintf("controllers.%s.replicas=1", alias))...)
			if pdbs := byKind(objs, "PodDisruptionBudget"); len(pdbs) != 0 {
				t.Errorf("replicas=1: %d PodDisruptionBudgets, want none", len(pdbs))
			}
			if d := byKind(objs, "Deployment")[0].Typed.(*appsv1.Deployment); *d.Spec.Replicas != 1 {
				t.Errorf("replicas=1: deployment replicas %d", *d.Spec.Replicas)
			}
		})
	}
}

// checkSpread asserts the one topology spread constraint: replicas of d's controller, one
// rollout at a time, over nodes, with the given whenUnsatisfiable.
func checkSpread(t *testing.T, pod corev1.PodSpec, d *appsv1.Deployment, want corev1.UnsatisfiableConstraintAction) {
	t.Helper()
	if len(pod.TopologySpreadConstraints) != 1 {
		t.Fatalf("topologySpreadConstraints %+v, want one", pod.TopologySpreadConstraints)
	}
	tsc := pod.TopologySpreadConstraints[0]
	if tsc.TopologyKey != "kubernetes.io/hostname" || tsc.MaxSkew != 1 || tsc.WhenUnsatisfiable != want ||
		tsc.LabelSelector == nil || !equalMaps(tsc.LabelSelector.MatchLabels, d.Spec.Selector.MatchLabels) ||
		!slices.Equal(tsc.MatchLabelKeys, []string{"pod-template-hash"}) {
		t.Errorf("topology spread %+v: want maxSkew 1 over kubernetes.io/hostname, %s, selecting %v per pod-template-hash", tsc, want, d.Spec.Selector.MatchLabels)
	}
}

// Placement options: control-plane nodes (opt-in), hard or no spreading, anti-affinity, and
// the priority class overridden or turned off.
func TestPlacement(t *testing.T) {
	c, v := chart(t)
	alias := v.Aliases()[0]
	deployment := func(t *testing.T, set ...string) (*appsv1.Deployment, corev1.PodSpec) {
		t.Helper()
		args := v.Only(alias)
		for _, s := range set {
			args = append(args, "--set", s)
		}
		d := byKind(render(t, c, "kcm-split", ns, args...), "Deployment")[0].Typed.(*appsv1.Deployment)
		return d, d.Spec.Template.Spec
	}
	controlPlane := corev1.Toleration{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	mine := corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "controllers", Effect: corev1.TaintEffectNoSchedule}

	t.Run("controlPlane", func(t *testing.T) {
		d, pod := deployment(t, "defaults.controlPlane=true")
		if !equalMaps(pod.NodeSelector, map[string]string{"node-role.kubernetes.io/control-plane": ""}) || !reflect.DeepEqual(pod.Tolerations, []corev1.Toleration{controlPlane, noExecute300}) {
			t.Errorf("nodeSelector %v, tolerations %+v; want the control-plane role and its taint tolerated", pod.NodeSelector, pod.Tolerations)
		}
		checkSpread(t, pod, d, corev1.ScheduleAnyway)
	})
	t.Run("controlPlane adds to the user's selector and tolerations", func(t *testing.T) {
		_, pod := deployment(t, "defaults.controlPlane=true", "defaults.nodeSelector.zone=a",
			"defaults.tolerations[0].key=dedicated", "defaults.tolerations[0].operator=Equal",
			"defaults.tolerations[0].value=controllers", "defaults.tolerations[0].effect=NoSchedule")
		if !equalMaps(pod.NodeSelector, map[string]string{"node-role.kubernetes.io/control-plane": "", "zone": "a"}) || !reflect.DeepEqual(pod.Tolerations, []corev1.Toleration{mine, controlPlane, noExecute300}) {
			t.Errorf("nodeSelector %v, tolerations %+v; want both selectors and both tolerations", pod.NodeSelector, pod.Tolerations)
		}
	})
	t.Run("controlPlane per controller", func(t *testing.T) {
		if _, pod := deployment(t, "controllers."+alias+".controlPlane=true"); pod.NodeSelector["node-role.kubernetes.io/control-plane"] != "" || !reflect.DeepEqual(pod.Tolerations, []corev1.Toleration{controlPlane, noExecute300}) {
			t.Errorf("controllers.%s.controlPlane=true: nodeSelector %v, tolerations %+v", alias, pod.NodeSelector, pod.Tolerations)
		}
		if _, pod := deployment(t, "defaults.controlPlane=true", "controllers."+alias+".controlPlane=false"); len(pod.NodeSelector) > 0 || !reflect.DeepEqual(pod.Tolerations, []corev1.Toleration{noExecute300}) {
			t.Errorf("controllers.%s.controlPlane=false overriding the defaults: nodeSelector %v, tolerations %+v", alias, pod.NodeSelector, pod.Tolerations)
		}
	})
	t.Run("noExecuteTolerationSeconds", func(t *testing.T) {
		short := noExecute300
		short.TolerationSeconds = ptr(int64(15))
		if _, pod := deployment(t, "defaults.noExecuteTolerationSeconds=15"); !reflect.DeepEqual(pod.Tolerations, []corev1.Toleration{short}) {
			t.Errorf("noExecuteTolerationSeconds=15: tolerations %+v", pod.Tolerations)
		}
		if _, pod := deployment(t, "defaults.noExecuteTolerationSeconds=null"); len(pod.Tolerations) > 0 {
			t.Errorf("noExecuteTolerationSeconds=null: tolerations %+v, want none", pod.Tolerations)
		}
	})
	t.Run("topologySpread", func(t *testing.T) {
		d, pod := deployment(t, "defaults.topologySpread=hard")
		checkSpread(t, pod, d, corev1.DoNotSchedule)
		if _, pod := deployment(t, "defaults.topologySpread=none"); len(pod.TopologySpreadConstraints) > 0 {
			t.Errorf("topologySpread=none: %+v", pod.TopologySpreadConstraints)
		}
	})
	t.Run("podAntiAffinity", func(t *testing.T) {
		_, pod := deployment(t, "defaults.podAntiAffinity=soft")
		if pod.Affinity == nil || pod.Affinity.PodAntiAffinity == nil || len(pod.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 {
			t.Errorf("podAntiAffinity=soft: affinity %+v", pod.Affinity)
		}
	})
	t.Run("priorityClassName", func(t *testing.T) {
		if _, pod := deployment(t, "defaults.priorityClassName="); pod.PriorityClassName != "" {
			t.Errorf("defaults.priorityClassName empty: %q, want none", pod.PriorityClassName)
		}
		if _, pod := deployment(t, "controllers."+alias+".priorityClassName=controllers"); pod.PriorityClassName != "controllers" {
			t.Errorf("controllers.%s.priorityClassName=controllers: %q", alias, pod.PriorityClassName)
		}
	})
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// checkDeployment asserts the properties the chart promises for every controller.
func checkDeployment(t *testing.T, d *appsv1.Deployment, cv ControllerValues, ns string) {
	t.Helper()
	ru := d.Spec.Strategy.RollingUpdate
	if d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType || ru == nil || ru.MaxUnavailable.IntValue() != 0 || ru.MaxSurge.IntValue() != 1 {
		t.Errorf("strategy %+v: want RollingUpdate maxUnavailable 0, maxSurge 1", d.Spec.Strategy)
	}
	pod := d.Spec.Template.Spec
	if !equalMaps(d.Spec.Selector.MatchLabels, d.Spec.Template.Labels) && !isSubset(d.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
		t.Errorf("selector %v does not select the Pod labels %v", d.Spec.Selector.MatchLabels, d.Spec.Template.Labels)
	}
	if pod.ServiceAccountName != d.Name {
		t.Errorf("serviceAccountName %q, want %q", pod.ServiceAccountName, d.Name)
	}
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext %+v: want runAsNonRoot and seccomp RuntimeDefault", psc)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	ctr := pod.Containers[0]
	sc := ctr.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
		t.Errorf("container securityContext %+v: want read-only root, no privilege escalation, all capabilities dropped", sc)
	}
	// A tag, or a digest (controllers.<alias>.image.digest) which wins over it.
	if repo := "ghcr.io/kcm-split/" + cv.Binary; !(strings.HasPrefix(ctr.Image, repo+":") || strings.HasPrefix(ctr.Image, repo+"@sha256:")) || strings.HasSuffix(ctr.Image, ":") {
		t.Errorf("image %q, want %s:<tag> or %s@<digest>", ctr.Image, repo, repo)
	}
	if len(ctr.Ports) != 1 || int(ctr.Ports[0].ContainerPort) != cv.Port {
		t.Errorf("ports %+v, want one on %d", ctr.Ports, cv.Port)
	}
	for path, p := range map[string]*corev1.Probe{"/readyz": ctr.ReadinessProbe, "/healthz": ctr.LivenessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != path || p.HTTPGet.Port.String() != ctr.Ports[0].Name || p.HTTPGet.Scheme != corev1.URISchemeHTTPS {
			t.Errorf("probe on %s: got %+v", path, p)
		}
	}
	for _, want := range []string{
		"--leader-elect-resource-name=" + cv.Binary,
		"--leader-elect-resource-namespace=" + ns,
		fmt.Sprintf("--secure-port=%d", cv.Port),
	} {
		if !slices.Contains(ctr.Args, want) {
			t.Errorf("args %v lack %s", ctr.Args, want)
		}
	}
}

func isSubset(sub, super map[string]string) bool {
	for k, v := range sub {
		if super[k] != v {
			return false
		}
	}
	return true
}

func TestAllAndNone(t *testing.T) {
	c, v := chart(t)
	var all []string
	for _, a := range v.Aliases() {
		all = append(all, "--set", "controllers."+a+".enabled=true")
	}
	objs := render(t, c, "kcm-split", ns, all...)
	if got := len(byKind(objs, "Deployment")); got != len(v.Controllers) {
		t.Errorf("all enabled: %d Deployments, want %d", got, len(v.Controllers))
	}
	if got := len(byKind(objs, "ConfigMap")); got != len(v.Controllers)+1 {
		t.Errorf("all enabled: %d dashboard ConfigMaps, want %d (one each and the overview)", got, len(v.Controllers)+1)
	}
	checkRenderedOnce(t, objs)
	var none []string
	for _, a := range v.Aliases() {
		none = append(none, "--set", "controllers."+a+".enabled=false")
	}
	if objs := render(t, c, "kcm-split", ns, none...); len(objs) != 0 {
		t.Errorf("nothing enabled: rendered %d objects, want none", len(objs))
	}
}

func TestServiceMonitorNeedsTheCRDAndIsOffByDefault(t *testing.T) {
	c, v := chart(t)
	if n := len(render(t, c, "r", ns)); n != 0 {
		t.Errorf("every controller is off by default, yet %d objects rendered", n)
	}
	capability := []string{"--api-versions", "monitoring.coreos.com/v1/ServiceMonitor"}
	if n := len(byKind(render(t, c, "r", ns, capability...), "ServiceMonitor")); n != 0 {
		t.Errorf("off by default, yet %d ServiceMonitors rendered", n)
	}
	if n := len(byKind(render(t, c, "r", ns, "--set", "serviceMonitor.enabled=true"), "ServiceMonitor")); n != 0 {
		t.Errorf("enabled without the CRD, yet %d ServiceMonitors rendered", n)
	}
	if n := len(byKind(render(t, c, "r", ns, append(capability, "--set", "serviceMonitor.enabled=true")...), "ServiceMonitor")); n != 0 {
		t.Errorf("no controller enabled (the default), yet %d ServiceMonitors rendered", n)
	}
	args := append(capability, "--set", "serviceMonitor.enabled=true", "--set", "serviceMonitor.labels.release=prom")
	for _, a := range v.Aliases() {
		args = append(args, "--set", "controllers."+a+".enabled=true")
	}
	objs := render(t, c, "r", ns, args...)
	sms := byKind(objs, "ServiceMonitor")
	if len(sms) != len(v.Controllers) {
		t.Fatalf("%d ServiceMonitors, want one per enabled controller (%d)", len(sms), len(v.Controllers))
	}
	// Each selects its controller's metrics Service by labels and port name.
	svcs := map[string]*corev1.Service{}
	for _, o := range byKind(objs, "Service") {
		svcs[o.Name] = o.Typed.(*corev1.Service)
	}
	for _, sm := range sms {
		var spec struct {
			Spec struct {
				Selector struct {
					MatchLabels map[string]string `json:"matchLabels"`
				} `json:"selector"`
				Endpoints []struct {
					Port string `json:"port"`
				} `json:"endpoints"`
			} `json:"spec"`
			Metadata struct {
				Labels map[string]string `json:"labels"`
			} `json:"metadata"`
		}
		b, _ := yaml.Marshal(sm.Raw)
		if err := yaml.Unmarshal(b, &spec); err != nil {
			t.Fatal(err)
		}
		svc := svcs[sm.Name]
		if svc == nil || !isSubset(spec.Spec.Selector.MatchLabels, svc.Labels) || len(spec.Spec.Endpoints) != 1 || spec.Spec.Endpoints[0].Port != svc.Spec.Ports[0].Name {
			t.Errorf("ServiceMonitor %s does not select Service %s's port: %+v", sm.Name, sm.Name, spec.Spec)
		}
		if spec.Metadata.Labels["release"] != "prom" {
			t.Errorf("ServiceMonitor %s lacks serviceMonitor.labels", sm.Name)
		}
	}
}

// With serving.tlsSecretName each controller serves the Secret's pair, and a renewal reaches
// it without a rollout: the binary re-reads the files when they change, and the kubelet
// updates a Secret volume in place only when it is mounted whole (never with subPath), so no
// checksum annotation has to roll the Pods.
func TestServingSecretIsMountedForLiveReload(t *testing.T) {
	c, v := chart(t)
	var all []string
	for _, a := range v.Aliases() {
		all = append(all, "--set", "controllers."+a+".enabled=true")
	}
	hasTLSFlag := func(args []string) bool {
		return slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--tls-") })
	}
	for _, o := range byKind(render(t, c, "kcm-split", ns, all...), "Deployment") {
		pod := o.Typed.(*appsv1.Deployment).Spec.Template.Spec
		if len(pod.Volumes) != 0 || hasTLSFlag(pod.Containers[0].Args) {
			t.Errorf("%s without serving.tlsSecretName: volumes %v, args %v; want neither (self-signed)", o.Name, pod.Volumes, pod.Containers[0].Args)
		}
	}

	objs := render(t, c, "kcm-split", ns, append(all, "--set", "serving.tlsSecretName=serving-cert")...)
	deployments := byKind(objs, "Deployment")
	if len(deployments) != len(v.Controllers) {
		t.Fatalf("%d Deployments, want %d", len(deployments), len(v.Controllers))
	}
	for _, o := range deployments {
		pod := o.Typed.(*appsv1.Deployment).Spec.Template.Spec
		var volume string
		for _, vol := range pod.Volumes {
			if vol.Secret != nil && vol.Secret.SecretName == "serving-cert" {
				volume = vol.Name
				if len(vol.Secret.Items) != 0 {
					t.Errorf("%s: Secret volume remaps keys %v; the flags name tls.crt and tls.key", o.Name, vol.Secret.Items)
				}
			}
		}
		if volume == "" {
			t.Errorf("%s: no volume of Secret serving-cert in %v", o.Name, pod.Volumes)
			continue
		}
		ctr := pod.Containers[0]
		var mounts []corev1.VolumeMount
		for _, m := range ctr.VolumeMounts {
			if m.Name == volume {
				mounts = append(mounts, m)
			}
		}
		if len(mounts) != 1 {
			t.Errorf("%s: volume %s mounted %d times, want once", o.Name, volume, len(mounts))
			continue
		}
		m := mounts[0]
		if m.SubPath != "" || m.SubPathExpr != "" {
			t.Errorf("%s: the Secret is mounted with subPath %q / subPathExpr %q: the kubelet would never update it", o.Name, m.SubPath, m.SubPathExpr)
		}
		if !m.ReadOnly {
			t.Errorf("%s: the Secret is mounted writable", o.Name)
		}
		for _, want := range []string{
			"--tls-cert-file=" + path.Join(m.MountPath, "tls.crt"),
			"--tls-private-key-file=" + path.Join(m.MountPath, "tls.key"),
		} {
			if !slices.Contains(ctr.Args, want) {
				t.Errorf("%s: args %v lack %s", o.Name, ctr.Args, want)
			}
		}
	}
}

// The schema turns typos and wrong types into errors naming the offending key.
func TestSchemaRejectsBadValues(t *testing.T) {
	c, v := chart(t)
	alias := v.Aliases()[0]
	for _, tc := range []struct {
		set, want string
	}{
		{"controllers." + alias + "X.enabled=true", "'" + alias + "X' not allowed"},
		{"controllers." + alias + ".replica=2", "'replica' not allowed"},
		{"controllers." + alias + ".replicas=two", "/controllers/" + alias + "/replicas"},
		{"controllers." + alias + ".flags.no-such-flag=1", "'no-such-flag' not allowed"},
		{"defaults.logLevl=debug", "'logLevl' not allowed"},
		{"defaults.logFormat=xml", "/defaults/logFormat"},
		{"defaults.leaderElection.leaseDuration=15", "/defaults/leaderElection/leaseDuration"},
		{"defaults.leaderElection.leaseDuration=15 seconds", "/defaults/leaderElection/leaseDuration"},
		{"defaults.image.pullPolicy=Sometimes", "/defaults/image/pullPolicy"},
		{"serviceMonitor.enabled=yes please", "/serviceMonitor/enabled"},
		{"dashboards.lable=x", "'lable' not allowed"},
		{"defaults.topologySpread=always", "/defaults/topologySpread"},
		{"defaults.controlPlane=yes", "/defaults/controlPlane"},
		{"controllers." + alias + ".controlPlane=maybe", "/controllers/" + alias + "/controlPlane"},
		{"defaults.priorityClassName=System_Cluster_Critical", "/defaults/priorityClassName"},
		{"controllers." + alias + ".priorityClassName=Not A Class", "/controllers/" + alias + "/priorityClassName"},
		{"defaults.replicas=-1", "/defaults/replicas"},
		{"podDisruptionBudget.maxUnavailable=0", "/podDisruptionBudget/maxUnavailable"},
		{"prometheusRule.takeOverWaitingFor=half an hour", "/prometheusRule/takeOverWaitingFor"},
		{"prometheusRule.migrationUnfinishedFor=30", "/prometheusRule/migrationUnfinishedFor"},
	} {
		_, err := c.Template("r", ns, "--set", tc.set)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--set %s: got %v, want an error mentioning %q", tc.set, err, tc.want)
		}
	}
}

// Every controller of the chart has its files, and no file belongs to no controller.
func TestEveryControllerHasItsFiles(t *testing.T) {
	c, v := chart(t)
	root, _ := RepoRoot()
	want := map[string]bool{}
	for _, alias := range v.Aliases() {
		cv := v.Controllers[alias]
		for _, f := range []string{
			filepath.Join(c.Dir, "rbac", alias+".yaml"),
			filepath.Join(c.Dir, "dashboards", alias+".json"),
			filepath.Join(root, "services", alias, "cmd", cv.Binary),
		} {
			if _, err := os.Stat(f); err != nil {
				t.Errorf("controller %s: %v", alias, err)
			}
		}
		want["rbac/"+alias+".yaml"] = true
		want["dashboards/"+alias+".json"] = true
	}
	want["dashboards/overview.json"] = true
	for _, dir := range []string{"rbac", "dashboards"} {
		entries, err := os.ReadDir(filepath.Join(c.Dir, dir))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if !want[dir+"/"+e.Name()] {
				t.Errorf("%s/%s belongs to no controller in values.yaml", dir, e.Name())
			}
		}
	}
}

// One Dockerfile builds every controller's image, as shipped (static, stripped, module alone,
// non-root, the chart's entrypoint), from the service named by ALIAS, whose only main package
// is the binary the chart runs; the binary's own default port is the port the chart probes.
func TestDockerfileAndPorts(t *testing.T) {
	_, v := chart(t)
	root, _ := RepoRoot()
	b, err := os.ReadFile(filepath.Join(root, "deploy", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	df := string(b)
	for _, want := range []string{
		"ARG ALIAS", "services/${ALIAS}/", "./cmd/*",
		"-trimpath", "CGO_ENABLED=0", "-s -w", "GOWORK=off",
		"USER 65532:65532",
		`ENTRYPOINT ["/controller"]`,
	} {
		if !strings.Contains(df, want) {
			t.Errorf("deploy/Dockerfile lacks %q", want)
		}
	}
	for _, alias := range v.Aliases() {
		cv := v.Controllers[alias]
		cmds, err := os.ReadDir(filepath.Join(root, "services", alias, "cmd"))
		if err != nil {
			t.Fatal(err)
		}
		if len(cmds) != 1 || cmds[0].Name() != cv.Binary {
			t.Errorf("services/%s/cmd holds %v, want only %s (the Dockerfile builds the one main package there)", alias, cmds, cv.Binary)
		}
		flags := binaryFlags(t, alias, cv.Binary)
		if got := flags["secure-port"].def; got != fmt.Sprint(cv.Port) {
			t.Errorf("%s: the binary's --secure-port default is %q, the chart's port %d", alias, got, cv.Port)
		}
	}
}

type flagInfo struct {
	category string
	def      string // as --help prints it: 5, 0s, "json"; empty when none is shown
}

var helpLine = regexp.MustCompile(`^\s+--([a-z0-9-]+)(?: value)?\s.*?(?:\(default: (.*?)\))?\s*(?:\[\$[A-Z0-9_]+\])?$`)

// binaryFlags parses the binary's --help: flag name -> category and default.
func binaryFlags(t *testing.T, alias, binary string) map[string]flagInfo {
	t.Helper()
	out, _ := exec.Command(buildBinary(t, alias, binary), "--help").CombinedOutput()
	flags := map[string]flagInfo{}
	category := ""
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "   ") && !strings.HasPrefix(strings.TrimSpace(line), "-") && strings.TrimSpace(line) != "" {
			category = strings.TrimSpace(line)
			continue
		}
		// --help and --version, printed last, are the command line's own, not a category's.
		if m := helpLine.FindStringSubmatch(line); m != nil && m[1] != "help" && m[1] != "version" {
			flags[m[1]] = flagInfo{category: category, def: m[2]}
		}
	}
	if len(flags) == 0 {
		t.Fatalf("%s --help listed no flags:\n%s", binary, out)
	}
	return flags
}

// The schema knows exactly the binary's own flags, with types that accept its defaults, so
// a flag the binary drops or adds cannot go unnoticed in the chart.
func TestSchemaFlagsMatchBinaries(t *testing.T) {
	c, v := chart(t)
	b, err := os.ReadFile(filepath.Join(c.Dir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties struct {
			Controllers struct {
				Properties map[string]struct {
					AllOf []struct {
						Properties struct {
							Flags struct {
								Properties map[string]struct {
									Type    string `json:"type"`
									Pattern string `json:"pattern"`
								} `json:"properties"`
							} `json:"flags"`
						} `json:"properties"`
					} `json:"allOf"`
				} `json:"properties"`
			} `json:"controllers"`
		} `json:"properties"`
	}
	if err := yaml.Unmarshal(b, &schema); err != nil {
		t.Fatal(err)
	}
	for _, alias := range v.Aliases() {
		t.Run(alias, func(t *testing.T) {
			entry, ok := schema.Properties.Controllers.Properties[alias]
			if !ok || len(entry.AllOf) != 2 {
				t.Fatalf("values.schema.json: controllers.%s must be allOf [controller, {flags}]", alias)
			}
			inSchema := entry.AllOf[1].Properties.Flags.Properties
			var own []string
			for name, f := range binaryFlags(t, alias, v.Controllers[alias].Binary) {
				// A binary's own flags are in "Controller" or a "Controller: <part>" category.
				if !strings.HasPrefix(f.category, "Controller") {
					continue
				}
				own = append(own, name)
				s, ok := inSchema[name]
				if !ok {
					t.Errorf("--%s: not in the schema's controllers.%s.flags", name, alias)
					continue
				}
				def := strings.Trim(f.def, `"`)
				switch s.Type {
				case "integer":
					if !regexp.MustCompile(`^-?[0-9]+$`).MatchString(def) {
						t.Errorf("--%s: schema says integer, default is %q", name, def)
					}
				case "number":
					if !regexp.MustCompile(`^-?[0-9.e+]+$`).MatchString(def) {
						t.Errorf("--%s: schema says number, default is %q", name, def)
					}
				case "boolean":
					if def != "" && def != "true" && def != "false" {
						t.Errorf("--%s: schema says boolean, default is %q", name, def)
					}
				case "string":
					if s.Pattern != "" && !regexp.MustCompile(s.Pattern).MatchString(def) {
						t.Errorf("--%s: default %q does not match the schema's pattern %s", name, def, s.Pattern)
					}
				default:
					t.Errorf("--%s: schema type %q", name, s.Type)
				}
			}
			for name := range inSchema {
				if !slices.Contains(own, name) {
					t.Errorf("schema flag %s is not a flag of the binary (its own: %v)", name, own)
				}
			}
		})
	}
}

// The README documents every value of values.yaml.
func TestEveryValueDocumented(t *testing.T) {
	c, _ := chart(t)
	b, err := os.ReadFile(filepath.Join(c.Dir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(b, &values); err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(c.Dir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			p := prefix + k
			// resources, tlsConfig and the security contexts are Kubernetes / Prometheus Operator types, each
			// documented as one value.
			if sub, ok := v.(map[string]any); ok && len(sub) > 0 && k != "resources" && k != "tlsConfig" && k != "podSecurityContext" && k != "containerSecurityContext" {
				if strings.HasPrefix(p, "controllers.") && strings.Count(p, ".") == 1 {
					p = "controllers.<alias>"
				}
				walk(p+".", sub)
				continue
			}
			paths = append(paths, p)
		}
	}
	walk("", values)
	sort.Strings(paths)
	paths = slices.Compact(paths)
	for _, p := range paths {
		if !strings.Contains(string(readme), "`"+p+"`") {
			t.Errorf("README.md does not document `%s`", p)
		}
	}
}

// checkRenderedOnce fails the test for every object rendered twice (same kind, namespace and
// name): an install would fail on it.
func checkRenderedOnce(t *testing.T, objs []Object) {
	t.Helper()
	seen := map[string]bool{}
	for _, o := range objs {
		key := o.Kind + "/" + o.Namespace + "/" + o.Name
		if seen[key] {
			t.Errorf("rendered twice: %s (an install would fail)", key)
		}
		seen[key] = true
	}
}
