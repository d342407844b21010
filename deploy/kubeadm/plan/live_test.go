package plan

import (
	"bytes"
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/kcm-split/kcm-split/services/namespace"
	"github.com/kcm-split/kcm-split/shared/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// namespaceController is the shipped namespace-controller, built from its module.
var namespaceController = testenv.Binary{ID: namespace.ControllerID, Dir: "../../../services/namespace"}

// kubeadmCommand is the command line of the kubeadm manifest in testdata.
func kubeadmCommand(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("testdata/kube-controller-manager-extra.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	if err := yaml.Unmarshal(b, &pod); err != nil {
		t.Fatal(err)
	}
	return pod.Spec.Containers[0].Command
}

// publishKCM does what the kubelet does for kube-controller-manager's static Pod on node: its
// mirror Pod, running command since now.
func publishKCM(t *testing.T, client kubernetes.Interface, ns, node string, command []string) {
	t.Helper()
	ctx := context.Background()
	name := kcmName + "-" + node
	if err := testenv.PublishMirrorPod(ctx, client, ns, name, node, kcmName, testenv.KCMPodLabels(), command); err != nil {
		t.Fatal(err)
	}
	if err := testenv.MirrorPodStarted(ctx, client, ns, name, time.Now()); err != nil {
		t.Fatal(err)
	}
}

// A kubeadm control plane of two nodes, kube-controller-manager's mirror Pods on the real
// apiserver: the plan read through the API is the plan read from the manifest; replicas that
// disagree are refused; and the --controllers it prints is what a binary with
// --take-over-from-kcm takes as proof: it waits while any replica runs its controller, and
// takes over once every replica runs the plan's value.
// Over 80 lines: one control plane rolled node by node, checked after each step.
func TestPlanFromLivePods(t *testing.T) {
	testenv.Require(t, env)
	client := env.Client(t)
	ns := env.Namespace(t)
	cmd := kubeadmCommand(t)
	for _, node := range []string{"cp-1", "cp-2"} {
		publishKCM(t, client, ns, node, cmd)
	}
	live := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := Main(context.Background(), append([]string{"--kubeconfig=" + env.Kubeconfig, "--namespace=" + ns}, args...), strings.NewReader(""), &out, &errOut)
		return code, out.String(), errOut.String()
	}

	src, err := readPods(context.Background(), client, ns, "component=kube-controller-manager")
	if err != nil {
		t.Fatal(err)
	}
	if want := "Pods kube-controller-manager-cp-1, kube-controller-manager-cp-2 in " + ns; src.What != want {
		t.Errorf("source %q, want %q", src.What, want)
	}
	fromAPI := planAll(t, src)
	file := extraManifest(t)
	file.Namespace = ns
	fromFile := planAll(t, file)
	a, _ := fromAPI.ValuesYAML()
	b, _ := fromFile.ValuesYAML()
	if cut := func(s string) string { _, rest, _ := strings.Cut(s, "\n"); return rest }; cut(a) != cut(b) {
		t.Errorf("the plan through the API differs from the manifest's:\n%s\n---\n%s", a, b)
	}
	code, out, errOut := live("--controllers=namespace", "-o", "controllers")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	newControllers := strings.TrimSpace(out)
	if newControllers != "*,bootstrapsigner,tokencleaner,-namespace-controller" {
		t.Errorf("--controllers=%s", newControllers)
	}

	// namespace-controller waiting for kube-controller-manager to turn its controller off.
	c := env.Start(t, namespaceController, "namespace-controller", "--take-over-from-kcm", "--kcm-namespace="+ns, "--leader-elect-resource-namespace="+ns)
	proven := func() float64 { return c.Metric("kcm_split_takeover_proven") }
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			return cond(), nil
		}); err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
	}
	waitFor("namespace-controller to lead and wait for proof", func() bool { return c.IsLeader(namespace.ControllerID) && proven() == 0 })

	// The first node rolls with the plan's value: the other still runs the controller.
	rolled := slices.Clone(cmd)
	for i, a := range rolled {
		if strings.HasPrefix(a, "--controllers=") {
			rolled[i] = "--controllers=" + newControllers
		}
	}
	publishKCM(t, client, ns, "cp-1", rolled)
	code, _, errOut = live("--controllers=all")
	if code != ExitUsage || !strings.Contains(errOut, "replicas run different flags") ||
		!strings.Contains(errOut, "--controllers: kube-controller-manager-cp-1: "+newControllers+"; kube-controller-manager-cp-2: *,bootstrapsigner,tokencleaner") {
		t.Errorf("replicas that disagree: exit %d, %s", code, errOut)
	}
	time.Sleep(2 * time.Second) // the take-over re-reads the Pods within a second
	if v := proven(); v != 0 {
		t.Fatalf("took over (kcm_split_takeover_proven %v) while cp-2 runs namespace-controller", v)
	}

	publishKCM(t, client, ns, "cp-2", rolled)
	start := time.Now()
	waitFor("the take-over once both replicas run the plan's --controllers", func() bool { return proven() == 1 })
	t.Logf("took over %s after the last roll", time.Since(start).Round(time.Millisecond))

	empty := env.Namespace(t)
	if code, _, errOut := live("--controllers=all", "--namespace="+empty); code != ExitUsage || !strings.Contains(errOut, "no Pod in namespace "+empty) {
		t.Errorf("no Pods: exit %d, %s", code, errOut)
	}
}
