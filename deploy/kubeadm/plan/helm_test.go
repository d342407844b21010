package plan

import (
	"bytes"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/kcm-split/kcm-split/shared/app"
)

// helmTemplate renders the chart with the values file and returns its manifests.
func helmTemplate(t *testing.T, values string, set ...string) []map[string]any {
	t.Helper()
	helm := tool(t, "helm")
	file := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(file, []byte(values), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"template", "kcm-split", filepath.Join(repoRoot(t), "charts", "kcm-split"), "--namespace", "kube-system", "-f", file}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(helm, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm template: %v: %s\nvalues:\n%s", err, stderr.String(), values)
	}
	var out []map[string]any
	for doc := range strings.SplitSeq(stdout.String(), "\n---") {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			t.Fatalf("helm template output: %v\n%s", err, doc)
		}
		if m != nil {
			out = append(out, m)
		}
	}
	return out
}

// deploymentArgs are the controller container's arguments of each rendered Deployment, by the
// chart key of its binary (read from its image).
func deploymentArgs(t *testing.T, objs []map[string]any) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, o := range objs {
		if o["kind"] != "Deployment" {
			continue
		}
		spec := o["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
		c := spec["containers"].([]any)[0].(map[string]any)
		image := c["image"].(string)
		var alias string
		for _, b := range binaries {
			if strings.Contains(image, "/"+b.ID+":") || strings.Contains(image, "/"+b.ID+"@") {
				alias = b.Alias
			}
		}
		if alias == "" {
			t.Fatalf("Deployment with image %s: no binary", image)
		}
		var args []string
		for _, a := range c["args"].([]any) {
			args = append(args, a.(string))
		}
		out[alias] = args
	}
	return out
}

// checkRendered checks each binary's rendered arguments: they hold want's, and the binary
// accepts them all as it would at start (flags defined, values valid together).
func checkRendered(t *testing.T, got map[string][]string, want map[string][]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("rendered Deployments for %v, want %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
	}
	for alias, args := range got {
		for _, w := range want[alias] {
			if !slices.Contains(args, w) {
				t.Errorf("%s: %s not among the rendered arguments %v", alias, w, args)
			}
		}
		if err := app.Parse(specs[alias](), args); err != nil {
			t.Errorf("%s refuses the rendered arguments %v: %v", alias, args, err)
		}
	}
}

// The values planned for kubeadm's kube-controller-manager render with the chart (its schema
// validates every key and type), and each Deployment passes the flags to its binary, which
// accepts them.
func TestValuesRenderKubeadm(t *testing.T) {
	p := planAll(t, extraManifest(t))
	values, err := p.ValuesYAML()
	if err != nil {
		t.Fatal(err)
	}
	common := []string{"--log-level=2", "--feature-gates=ClientsAllowCARotation=false", "--take-over-from-kcm",
		"--kcm-namespace=kube-system", "--kcm-pod-selector=component=kube-controller-manager", "--kcm-lease-name=kube-controller-manager"}
	checkRendered(t, deploymentArgs(t, helmTemplate(t, values)), map[string][]string{
		"endpoints": append([]string{"--concurrent-service-endpoint-syncs=10", "--kube-api-qps=150", "--kube-api-burst=300"}, common...),
		"namespace": append([]string{"--concurrent-namespace-syncs=5", "--kube-api-qps=1000", "--kube-api-burst=10000"}, common...),
		"nodelifecycle": append([]string{"--allocate-node-cidrs=true", "--cluster-cidr=10.244.0.0/16", "--node-cidr-mask-size=26",
			"--node-eviction-rate=0.2", "--node-monitor-grace-period=40s", "--service-cluster-ip-range=10.96.0.0/12",
			"--kube-api-qps=150", "--kube-api-burst=300"}, common...),
		"pvbinder": append([]string{"--pvclaimbinder-sync-period=30s", "--kube-api-qps=50", "--kube-api-burst=100"}, common...),
		"quota":    append([]string{"--kube-api-qps=50", "--kube-api-burst=100"}, common...),
	})
}

// A value for every flag the plan carries, as kube-controller-manager is given it (and as the
// chart renders it back).
var samples = map[string]string{
	"feature-gates": "ClientsAllowCARotation=false", "kube-api-qps": "25", "kube-api-burst": "40",
	"kube-api-content-type": "application/json", "min-resync-period": "6h0m0s",
	"leader-elect-lease-duration": "30s", "leader-elect-renew-deadline": "20s", "leader-elect-retry-period": "4s",
	"leader-elect-resource-name": "kcm-lease", "leader-elect-resource-namespace": "kube-system",
	"profiling": "true", "v": "3", "vmodule": "sync=4", "logging-format": "json", "tls-min-version": "VersionTLS13",
	"authentication-token-webhook-cache-ttl": "1m0s", "authorization-always-allow-paths": "/healthz,/readyz,/livez,/version",
	"authorization-webhook-cache-authorized-ttl": "1m0s", "authorization-webhook-cache-unauthorized-ttl": "10s",

	"concurrent-endpoint-syncs": "7", "endpoint-updates-batch-period": "1s", "concurrent-service-endpoint-syncs": "8",
	"endpointslice-updates-batch-period": "2s", "max-endpoints-per-slice": "50", "mirroring-concurrent-service-endpoint-syncs": "6",
	"mirroring-endpointslice-updates-batch-period": "3s", "mirroring-max-endpoints-per-subset": "500",

	"concurrent-namespace-syncs": "4", "namespace-sync-period": "10m",

	"node-monitor-period": "4s", "node-monitor-grace-period": "45s", "node-startup-grace-period": "2m",
	"node-eviction-rate": "0.3", "secondary-node-eviction-rate": "0.02", "large-cluster-size-threshold": "40",
	"unhealthy-zone-threshold": "0.6", "allocate-node-cidrs": "true",
	// Dual-stack; --node-cidr-mask-size, which both refuse with the others, is in TestValuesRenderKubeadm.
	"cluster-cidr": "10.244.0.0/16,fd00:10:244::/56", "service-cluster-ip-range": "10.96.0.0/12,fd00:10:96::/112",
	"node-cidr-mask-size-ipv4": "25", "node-cidr-mask-size-ipv6": "64",

	"pvclaimbinder-sync-period": "20s", "enable-dynamic-provisioning": "false", "enable-hostpath-provisioner": "false",
	// The recycler templates are files the test writes.
	"pv-recycler-minimum-timeout-nfs": "200", "pv-recycler-increment-timeout-nfs": "20",
	"pv-recycler-minimum-timeout-hostpath": "50", "pv-recycler-timeout-increment-hostpath": "20",

	"concurrent-resource-quota-syncs": "6", "resource-quota-sync-period": "4m",

	"concurrent-service-syncs": "2",
}

// Every flag the plan can carry, at once, to every binary: the values render, each Deployment
// passes each flag under its binary's name, and each binary accepts the lot. A flag added to
// the table as carried without a sample here fails.
func TestValuesRenderEveryCarriedFlag(t *testing.T) {
	samples := maps.Clone(samples)
	template := filepath.Join(t.TempDir(), "recycler.yaml")
	pod := "apiVersion: v1\nkind: Pod\nmetadata:\n  name: recycler\nspec:\n  volumes: [{name: vol}]\n  containers: [{name: recycler, image: busybox}]\n"
	if err := os.WriteFile(template, []byte(pod), 0o600); err != nil {
		t.Fatal(err)
	}
	samples["pv-recycler-pod-template-filepath-nfs"], samples["pv-recycler-pod-template-filepath-hostpath"] = template, template
	var args []string
	want := map[string][]string{}
	for _, b := range binaries {
		want[b.Alias] = []string{"--kcm-namespace=kube-system", "--kcm-lease-name=kcm-lease"}
	}
	qps := map[string]string{"endpoints": "75", "namespace": "500", "nodelifecycle": "75", "pvbinder": "25", "quota": "25", "servicelb": "25"}
	burst := map[string]string{"endpoints": "120", "namespace": "4000", "nodelifecycle": "120", "pvbinder": "40", "quota": "40", "servicelb": "40"}
	for _, f := range kcmFlags {
		var arg string
		switch f.How {
		case toFlag, toExtraArg:
			arg = "--" + f.To + "=" + samples[f.Name]
		case toGates:
			arg = "--feature-gates=" + samples[f.Name]
		case toLogLevel:
			arg = "--log-level=" + samples[f.Name]
		case toLogFormat:
			arg = "--log-format=" + samples[f.Name]
		case toLeaderElection:
			arg = "--" + f.Name + "=" + samples[f.Name]
		case toQPS, toBurst, toKCMLease:
		default:
			continue
		}
		if f.Name == "node-cidr-mask-size" {
			continue // see samples
		}
		if samples[f.Name] == "" {
			t.Errorf("--%s is carried: give it a sample", f.Name)
			continue
		}
		args = append(args, "--"+f.Name+"="+samples[f.Name])
		for _, b := range binaries {
			switch {
			case f.How == toQPS:
				want[b.Alias] = append(want[b.Alias], "--kube-api-qps="+qps[b.Alias])
			case f.How == toBurst:
				want[b.Alias] = append(want[b.Alias], "--kube-api-burst="+burst[b.Alias])
			case arg != "" && (len(f.For) == 0 || slices.Contains(f.For, b.Alias)):
				want[b.Alias] = append(want[b.Alias], arg)
			}
		}
	}
	p := planOf(t, Options{Controllers: "all,servicelb", TakeOver: true}, args...)
	for _, o := range p.Outcomes {
		if o.Category != carried {
			t.Errorf("%s: %s (%s)", o.Written, o.Category, o.Why)
		}
	}
	values, err := p.ValuesYAML()
	if err != nil {
		t.Fatal(err)
	}
	checkRendered(t, deploymentArgs(t, helmTemplate(t, values)), want)
}

// The chart's Leader Migration names the same kube-controller-manager controllers for each
// binary as the plan turns off.
func TestKCMNamesAreTheCharts(t *testing.T) {
	set := []string{"leaderMigration.enabled=true"}
	var want []string
	for _, b := range binaries {
		set = append(set, "controllers."+b.Alias+".enabled=true")
		for _, c := range b.Replaces {
			want = append(want, c.Name)
		}
	}
	for _, o := range helmTemplate(t, "{}", set...) {
		if o["kind"] != "ConfigMap" || !strings.HasSuffix(o["metadata"].(map[string]any)["name"].(string), "-leader-migration") {
			continue
		}
		var cfg struct {
			ControllerLeaders []struct{ Name string } `json:"controllerLeaders"`
		}
		if err := yaml.Unmarshal([]byte(o["data"].(map[string]any)["config.yaml"].(string)), &cfg); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, c := range cfg.ControllerLeaders {
			got = append(got, c.Name)
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("the chart's Leader Migration names %v, the plan %v", got, want)
		}
		return
	}
	t.Fatal("no LeaderMigrationConfiguration rendered")
}
