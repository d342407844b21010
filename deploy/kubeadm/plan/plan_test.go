package plan

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// planOf plans from a command line.
func planOf(t *testing.T, opts Options, args ...string) *Plan {
	t.Helper()
	flags, err := parseFlags(args)
	if err != nil {
		t.Fatal(err)
	}
	p, err := makePlan(source{What: "test", Flags: flags, Namespace: "kube-system", Selector: "component=kube-controller-manager"}, opts)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// extraManifest is testdata's kubeadm manifest of a kube-controller-manager with extraArgs.
func extraManifest(t *testing.T) source {
	t.Helper()
	src, err := readManifest("testdata/kube-controller-manager-extra.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// planAll plans src for every binary, with the take-over.
func planAll(t *testing.T, src source) *Plan {
	t.Helper()
	p, err := makePlan(src, Options{Controllers: "all", TakeOver: true})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// outcomeOf is what became of the flag written so.
func outcomeOf(t *testing.T, p *Plan, written string) outcome {
	t.Helper()
	for _, o := range p.Outcomes {
		if o.Written == written {
			return o
		}
	}
	t.Fatalf("no outcome for %s in %+v", written, p.Outcomes)
	return outcome{}
}

func wantValue(t *testing.T, p *Plan, want any, path ...string) {
	t.Helper()
	got, ok := p.Values.get(path...)
	if !ok {
		t.Errorf("%s: absent, want %v", strings.Join(path, "."), want)
		return
	}
	if items, isList := got.([]item); isList {
		var vs []string
		for _, it := range items {
			vs = append(vs, it.value)
		}
		got = vs
	}
	if !equal(got, want) {
		t.Errorf("%s = %#v, want %#v", strings.Join(path, "."), got, want)
	}
}

func equal(a, b any) bool {
	if as, ok := a.([]string); ok {
		bs, ok := b.([]string)
		return ok && slices.Equal(as, bs)
	}
	return a == b
}

func wantAbsent(t *testing.T, p *Plan, path ...string) {
	t.Helper()
	if v, ok := p.Values.get(path...); ok {
		t.Errorf("%s = %v, want absent", strings.Join(path, "."), v)
	}
}

// A kubeadm cluster's kube-controller-manager with extraArgs, "all": every flag has its
// outcome, each carried one is at its key with the chart's type.
// Over 80 lines: one plan, its values and outcomes checked key by key.
func TestPlanKubeadmAll(t *testing.T) {
	src := extraManifest(t)
	p := planAll(t, src)
	if want := "*,bootstrapsigner,tokencleaner,-endpoints-controller,-endpointslice-controller,-endpointslice-mirroring-controller," +
		"-namespace-controller,-node-lifecycle-controller,-taint-eviction-controller,-node-ipam-controller," +
		"-persistentvolume-binder-controller,-resourcequota-controller"; p.New.String() != want {
		t.Errorf("--controllers=%s\nwant           %s", p.New, want)
	}
	var written []string
	for _, o := range p.Outcomes {
		written = append(written, o.Written)
	}
	for _, g := range src.Flags {
		if !slices.Contains(written, g.String()) {
			t.Errorf("%s: no outcome", g)
		}
	}
	if len(p.Outcomes) != len(src.Flags) {
		t.Errorf("%d outcomes for %d flags", len(p.Outcomes), len(src.Flags))
	}

	nl := []string{"controllers", "nodelifecycle", "flags"}
	wantValue(t, p, true, append(nl, "allocate-node-cidrs")...)
	wantValue(t, p, "10.244.0.0/16", append(nl, "cluster-cidr")...)
	wantValue(t, p, "10.96.0.0/12", append(nl, "service-cluster-ip-range")...)
	wantValue(t, p, int64(26), append(nl, "node-cidr-mask-size")...)
	wantValue(t, p, 0.2, append(nl, "node-eviction-rate")...)
	wantValue(t, p, "40s", append(nl, "node-monitor-grace-period")...)
	wantAbsent(t, p, append(nl, "controllers")...) // all three run
	wantValue(t, p, int64(10), "controllers", "endpoints", "flags", "concurrent-service-endpoint-syncs")
	wantValue(t, p, int64(5), "controllers", "namespace", "flags", "concurrent-namespace-syncs")
	wantValue(t, p, "30s", "controllers", "pvbinder", "flags", "pvclaimbinder-sync-period")
	// Budgets: one share per controller, the namespace controller's raised as upstream raises it.
	wantValue(t, p, int64(150), "controllers", "endpoints", "kubeAPIQPS")
	wantValue(t, p, int64(300), "controllers", "endpoints", "kubeAPIBurst")
	wantValue(t, p, int64(1000), "controllers", "namespace", "kubeAPIQPS")
	wantValue(t, p, int64(10000), "controllers", "namespace", "kubeAPIBurst")
	wantValue(t, p, int64(50), "controllers", "quota", "kubeAPIQPS")
	wantValue(t, p, "2", "controllers", "quota", "logLevel")
	wantValue(t, p, []string{"--feature-gates=ClientsAllowCARotation=false"}, "controllers", "pvbinder", "extraArgs")
	for _, b := range []string{"endpoints", "namespace", "nodelifecycle", "pvbinder", "quota"} {
		wantValue(t, p, true, "controllers", b, "enabled")
	}
	wantAbsent(t, p, "controllers", "servicelb")
	wantValue(t, p, true, "takeOverFromKCM", "enabled")
	wantValue(t, p, "kube-system", "takeOverFromKCM", "namespace")
	wantValue(t, p, "component=kube-controller-manager", "takeOverFromKCM", "podSelector")
	wantValue(t, p, "kube-controller-manager", "takeOverFromKCM", "leaseName")

	for written, want := range map[string]category{
		"--terminated-pod-gc-threshold=100":                     stays,
		"--cluster-signing-key-file=/etc/kubernetes/pki/ca.key": stays,
		"--kubeconfig=/etc/kubernetes/controller-manager.conf":  setByChart,
		"--bind-address=127.0.0.1":                              setByChart,
		"--leader-elect":                                        carriedAsIs,
		"--controllers=*,bootstrapsigner,tokencleaner":          carriedAsIs,
		"--cluster-name=kubernetes":                             stays,
		"--node-monitor-grace-period=40s":                       carried,
	} {
		if o := outcomeOf(t, p, written); o.Category != want {
			t.Errorf("%s: %s (%s), want %s", written, o.Category, o.Why, want)
		}
	}
	if o := outcomeOf(t, p, "--terminated-pod-gc-threshold=100"); !strings.Contains(o.Why, "pod-garbage-collector-controller stays in kube-controller-manager") {
		t.Errorf("--terminated-pod-gc-threshold: %q", o.Why)
	}
	notes := strings.Join(p.Notes, "\n")
	for _, want := range []string{
		"servicelb left out of all",
		"controllers.pvbinder.kubeAPIQPS: 50 is below pv-binder-controller's own default, 200",
		"controllers.nodelifecycle.hostNetwork: true",
	} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, notes)
		}
	}
}

// The binaries run what kube-controller-manager ran: a subset becomes the binary's own
// --controllers, a binary whose controllers it does not run is left out of "all".
func TestPlanOnlyWhatKCMRuns(t *testing.T) {
	p := planOf(t, Options{Controllers: "all"}, "--controllers=*,-endpointslicemirroring,-nodelifecycle,-taint-eviction-controller,-node-ipam-controller", "--kube-api-qps=10")
	wantValue(t, p, "endpoints-controller,endpointslice-controller", "controllers", "endpoints", "flags", "controllers")
	wantValue(t, p, int64(20), "controllers", "endpoints", "kubeAPIQPS") // two of its three controllers
	wantAbsent(t, p, "controllers", "nodelifecycle")
	wantAbsent(t, p, "takeOverFromKCM")
	// What concerns the binaries left out stays as it was.
	if want := "*,-nodelifecycle,-taint-eviction-controller,-node-ipam-controller,-endpoints-controller,-endpointslice-controller," +
		"-endpointslice-mirroring-controller,-namespace-controller,-persistentvolume-binder-controller,-resourcequota-controller"; p.New.String() != want {
		t.Errorf("--controllers=%s, want %s", p.New, want)
	}
	if !strings.Contains(strings.Join(p.Notes, "\n"), "nodelifecycle left out of all: kube-controller-manager runs none of its controllers") {
		t.Errorf("notes: %v", p.Notes)
	}

	// node-ipam-controller alone does nothing without --allocate-node-cidrs, in both.
	off := "--controllers=*,-node-lifecycle-controller,-taint-eviction-controller"
	p = planOf(t, Options{Controllers: "all"}, off)
	wantAbsent(t, p, "controllers", "nodelifecycle")
	if !strings.Contains(strings.Join(p.Notes, "\n"), "turns on node-ipam-controller only, which does nothing without --allocate-node-cidrs") {
		t.Errorf("notes: %v", p.Notes)
	}
	p = planOf(t, Options{Controllers: "nodelifecycle"}, off, "--allocate-node-cidrs=true", "--cluster-cidr=10.244.0.0/16")
	wantValue(t, p, "node-ipam-controller", "controllers", "nodelifecycle", "flags", "controllers")

	// Named, a binary runs even so, and the plan says so.
	p = planOf(t, Options{Controllers: "namespace"}, "--controllers=*,-namespace")
	wantValue(t, p, true, "controllers", "namespace", "enabled")
	if !strings.Contains(strings.Join(p.Notes, "\n"), "enabled as asked") {
		t.Errorf("notes: %v", p.Notes)
	}

	flags, _ := parseFlags([]string{"--controllers=garbage-collector-controller"})
	if _, err := makePlan(source{Flags: flags}, Options{Controllers: "all"}); err == nil || !strings.Contains(err.Error(), "nothing to move") {
		t.Errorf("nothing to move: %v", err)
	}
}

func TestPlanNotChosen(t *testing.T) {
	p := planOf(t, Options{Controllers: "quota"}, "--pvclaimbinder-sync-period=1m", "--concurrent-resource-quota-syncs=9",
		"--leader-elect-resource-name=kcm", "--leader-elect-lease-duration=30s", "--not-a-flag=1")
	if o := outcomeOf(t, p, "--pvclaimbinder-sync-period=1m"); o.Category != notChosen || !strings.Contains(o.Why, "pvbinder") {
		t.Errorf("pvclaimbinder-sync-period: %+v", o)
	}
	if o := outcomeOf(t, p, "--leader-elect-resource-name=kcm"); o.Category != notChosen || !strings.Contains(o.Why, "--take-over=false") {
		t.Errorf("leader-elect-resource-name without take-over: %+v", o)
	}
	if o := outcomeOf(t, p, "--not-a-flag=1"); o.Category != unknownToKCM {
		t.Errorf("--not-a-flag: %+v", o)
	}
	wantValue(t, p, int64(9), "controllers", "quota", "flags", "concurrent-resource-quota-syncs")
	wantValue(t, p, "30s", "defaults", "leaderElection", "leaseDuration")
	wantAbsent(t, p, "controllers", "pvbinder")
}

func TestPlanSpecialValues(t *testing.T) {
	p := planOf(t, Options{Controllers: "endpoints", TakeOver: true, DespiteLeaseNamespace: true},
		"--feature-gates=kube:PodLevelResources=true,wardle:B=false,ControllerManagerReleaseLeaderElectionLockOnExit=true",
		"--feature-gates=ClientsAllowCARotation=false,kube:NoSuchGate=true",
		"--leader-elect-resource-name=kcm", "--leader-elect-resource-namespace=elsewhere",
		"--leader-elect=false", "--tls-min-version=VersionTLS10", "--tls-min-version=VersionTLS13",
		"--logging-format=text", "--v=11", "--kube-api-qps=0.5", "--profiling=false")
	wantValue(t, p, []string{"--feature-gates=PodLevelResources=true,ControllerManagerReleaseLeaderElectionLockOnExit=true,ClientsAllowCARotation=false",
		"--tls-min-version=VersionTLS13", "--profiling=false"}, "controllers", "endpoints", "extraArgs")
	if o := outcomeOf(t, p, "--feature-gates=wardle:B=false"); o.Category != noSuch {
		t.Errorf("another component's gate: %+v", o)
	}
	// Gates the binaries' --feature-gates refuses (a name of no Kubernetes 1.36 gate) are named,
	// not carried: carried, they would keep every binary down. k8s.io/controller-manager's own
	// gate, which kube-controller-manager registers too, is carried above.
	if o := outcomeOf(t, p, "--feature-gates=NoSuchGate=true"); o.Category != noSuch || !strings.Contains(o.Why, "do not know") {
		t.Errorf("gates the binaries do not know: %+v", o)
	}
	wantValue(t, p, "kcm", "takeOverFromKCM", "leaseName")
	if o := outcomeOf(t, p, "--leader-elect-resource-namespace=elsewhere"); o.Category != noSuch || !strings.Contains(o.Why, "one namespace") {
		t.Errorf("Lease elsewhere: %+v", o)
	}
	wantValue(t, p, "kube-system", "takeOverFromKCM", "namespace")
	if o := outcomeOf(t, p, "--leader-elect=false"); o.Category != noSuch {
		t.Errorf("--leader-elect=false: %+v", o)
	}
	wantValue(t, p, "console", "defaults", "logFormat")
	if o := outcomeOf(t, p, "--v=11"); o.Category != noSuch {
		t.Errorf("--v=11: %+v", o)
	}
	wantValue(t, p, 1.5, "controllers", "endpoints", "kubeAPIQPS")
	if !strings.Contains(strings.Join(p.Notes, "\n"), "--tls-min-version is given 2 times (--tls-min-version=VersionTLS10, --tls-min-version=VersionTLS13): kube-controller-manager uses the last") {
		t.Errorf("notes: %v", p.Notes)
	}
}

// A kube-controller-manager in a Leader Migration, or (for a take-over) with its Lease outside
// its Pods' namespace, is refused with exit 2 unless the operator overrides that by its flag.
func TestPlanRefusals(t *testing.T) {
	plan := func(opts Options, args ...string) error {
		flags, err := parseFlags(args)
		if err != nil {
			t.Fatal(err)
		}
		_, err = makePlan(source{What: "test", Flags: flags, Namespace: "kube-system", Selector: "component=kube-controller-manager"}, opts)
		return err
	}
	for _, tc := range []struct {
		opts Options
		args []string
		want string // "": planned
	}{
		{Options{Controllers: "all", TakeOver: true}, []string{"--enable-leader-migration"}, "--despite-leader-migration"},
		{Options{Controllers: "all"}, []string{"--enable-leader-migration=true", "--leader-migration-config=/m.yaml"}, "--despite-leader-migration"},
		{Options{Controllers: "all", DespiteLeaderMigration: true}, []string{"--enable-leader-migration"}, ""},
		{Options{Controllers: "all"}, []string{"--enable-leader-migration=false"}, ""},
		{Options{Controllers: "all", TakeOver: true}, []string{"--leader-elect-resource-namespace=elsewhere"}, "--despite-lease-namespace"},
		{Options{Controllers: "all", TakeOver: true, DespiteLeaseNamespace: true}, []string{"--leader-elect-resource-namespace=elsewhere"}, ""},
		{Options{Controllers: "all", TakeOver: true}, []string{"--leader-elect-resource-namespace=kube-system"}, ""},
		{Options{Controllers: "all"}, []string{"--leader-elect-resource-namespace=elsewhere"}, ""},
	} {
		err := plan(tc.opts, tc.args...)
		var ie inputError
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v %v: %v", tc.opts, tc.args, err)
		case tc.want != "" && (!errors.As(err, &ie) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v %v: error %v, want an input error naming %s", tc.opts, tc.args, err, tc.want)
		}
	}

	// The command exits 2, says why on stderr and prints nothing on stdout.
	src, err := os.ReadFile("testdata/kube-controller-manager.yaml")
	if err != nil {
		t.Fatal(err)
	}
	manifest := filepath.Join(t.TempDir(), "kcm.yaml")
	src = bytes.Replace(src, []byte("    - --allocate-node-cidrs=true\n"), []byte("    - --allocate-node-cidrs=true\n    - --enable-leader-migration\n"), 1)
	if err := os.WriteFile(manifest, src, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		code int
	}{
		{nil, ExitUsage},
		{[]string{"--despite-leader-migration"}, ExitOK},
	} {
		var out, errOut bytes.Buffer
		code := Main(context.Background(), append([]string{"--manifest=" + manifest, "--controllers=all"}, tc.args...), strings.NewReader(""), &out, &errOut)
		if code != tc.code || (code == ExitUsage) != (out.Len() == 0) || code == ExitUsage && !strings.Contains(errOut.String(), "Leader Migration") {
			t.Errorf("%v: exit %d, stdout %d bytes, stderr %q; want %d", tc.args, code, out.Len(), errOut.String(), tc.code)
		}
	}
}

// The command: exit codes, and every flag named on stderr or in the values.
func TestCommand(t *testing.T) {
	run := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := Main(context.Background(), args, strings.NewReader(""), &out, &errOut)
		return code, out.String(), errOut.String()
	}
	const manifest = "--manifest=testdata/kube-controller-manager-extra.yaml"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "give one of --manifest and --kubeconfig"},
		{[]string{manifest, "--kubeconfig=x"}, "give one of --manifest and --kubeconfig"},
		{[]string{manifest, "--controllers=kube-proxy"}, `unknown "kube-proxy"`},
		{[]string{manifest}, "--controllers is required"},
		{[]string{manifest, "--controllers=all", "-o", "json"}, `-o "json"`},
		{[]string{manifest, "--controllers=all", "extra"}, "unexpected arguments"},
		{[]string{"--manifest=testdata", "--controllers=all"}, "--manifest"},
		{[]string{"--no-such-flag"}, "flag provided but not defined"},
		{[]string{"--kubeconfig=/nonexistent", "--controllers=all"}, "--kubeconfig"},
	} {
		code, out, errOut := run(tc.args...)
		if code != ExitUsage || out != "" || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want %d and %q", tc.args, code, out, errOut, ExitUsage, tc.want)
		}
	}
	if code, _, errOut := run("--help"); code != ExitOK || !strings.Contains(errOut, "--controllers") {
		t.Errorf("--help: %d %q", code, errOut)
	}

	code, out, errOut := run(manifest, "--controllers=all", "-o", "controllers")
	if code != ExitOK || !strings.HasPrefix(out, "*,bootstrapsigner,tokencleaner,-endpoints-controller,") || strings.Count(out, "\n") != 1 {
		t.Errorf("-o controllers: %d %q %q", code, out, errOut)
	}
	p := planAll(t, extraManifest(t))
	for _, o := range p.Outcomes {
		if !o.isCarried() && !strings.Contains(errOut, "  "+o.Written+": "+string(o.Category)) {
			t.Errorf("stderr does not name %s (%s):\n%s", o.Written, o.Category, errOut)
		}
	}

	code, out, _ = run(manifest, "--controllers=all", "-o", "kubeadm")
	var cc struct {
		APIVersion, Kind  string
		ControllerManager struct {
			ExtraArgs []struct{ Name, Value string } `json:"extraArgs"`
		} `json:"controllerManager"`
	}
	if err := yaml.UnmarshalStrict([]byte(out), &cc); code != ExitOK || err != nil {
		t.Fatalf("-o kubeadm: %d %v\n%s", code, err, out)
	}
	if cc.APIVersion != "kubeadm.k8s.io/v1beta4" || cc.Kind != "ClusterConfiguration" || len(cc.ControllerManager.ExtraArgs) != 1 ||
		cc.ControllerManager.ExtraArgs[0].Name != "controllers" || cc.ControllerManager.ExtraArgs[0].Value != p.New.String() {
		t.Errorf("-o kubeadm: %+v", cc)
	}

	code, out, _ = run(manifest, "--controllers=all", "-o", "values")
	var values map[string]any
	if err := yaml.Unmarshal([]byte(out), &values); code != ExitOK || err != nil || values["controllers"] == nil {
		t.Fatalf("-o values: %d %v\n%s", code, err, out)
	}
	for _, o := range p.Outcomes {
		if !strings.Contains(out, "#   "+o.Written+": "+string(o.Category)) {
			t.Errorf("the values' comments do not name %s", o.Written)
		}
	}

	code, out, _ = run(manifest, "--controllers=all")
	if docs := strings.Split(out, "\n---\n"); code != ExitOK || len(docs) != 2 || !strings.Contains(docs[0], "takeOverFromKCM:") || !strings.Contains(docs[1], "kind: ClusterConfiguration") {
		t.Errorf("-o all: %d\n%s", code, out)
	}
}
