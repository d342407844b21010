package chart

// The IPAddressPool CRD comes with service-lb only, is upgraded by `helm upgrade` (which never
// touches crds/), and stays, pools and all, when service-lb is turned off or the release goes.

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/kcm-split/kcm-split/shared/testenv"
)

const poolCRD = "ipaddresspools.lb.kcm-split.io"

func TestPoolCRDRendersWithServiceLBOnly(t *testing.T) {
	c, v := chart(t)
	for _, alias := range v.Aliases() {
		crds := byKind(render(t, c, "r", ns, v.Only(alias)...), "CustomResourceDefinition")
		want := 0
		if alias == "servicelb" {
			want = 1
		}
		if len(crds) != want {
			t.Errorf("%s alone: %d CRDs, want %d", alias, len(crds), want)
		}
	}
	crds := byKind(render(t, c, "r", ns, v.Only("servicelb")...), "CustomResourceDefinition")
	md, _ := crds[0].Raw["metadata"].(map[string]any)
	ann, _ := md["annotations"].(map[string]any)
	if crds[0].Name != poolCRD || ann["helm.sh/resource-policy"] != "keep" {
		t.Errorf("CRD %s annotations %v: want %s kept on uninstall", crds[0].Name, ann, poolCRD)
	}
	// The rendered CRD is crds/'s file (the one `kubectl apply -f crds/` and the tests use).
	b, err := os.ReadFile(filepath.Join(c.Dir, "crds", "lb.kcm-split.io_ipaddresspools.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var file map[string]any
	if err := yaml.Unmarshal(b, &file); err != nil {
		t.Fatal(err)
	}
	got, _ := yaml.Marshal(crds[0].Raw["spec"])
	want, _ := yaml.Marshal(file["spec"])
	if string(got) != string(want) {
		t.Errorf("rendered CRD spec differs from crds/'s file")
	}
	if n := len(byKind(render(t, c, "r", ns, append(v.Only("servicelb"), "--set", "crds.install=false")...), "CustomResourceDefinition")); n != 0 {
		t.Errorf("crds.install=false: %d CRDs", n)
	}
	if _, err := c.Template("r", ns, "--set", "crds.install=maybe"); err == nil || !strings.Contains(err.Error(), "/crds/install") {
		t.Errorf("crds.install=maybe: got %v, want a schema error", err)
	}
}

// Over 80 lines: one Helm release's life (install, upgrade with the older chart, upgrade, service-lb off, uninstall), the CRD and the pool checked after each step.
func TestPoolCRDUpgradedAndKept(t *testing.T) {
	testenv.Require(t, env)
	c, _ := chart(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	dyn := dynamic.NewForConfigOrDie(env.Config)
	crdClient := dyn.Resource(crdGVR)
	pools := dyn.Resource(schema.GroupVersionResource{Group: "lb.kcm-split.io", Version: "v1alpha1", Resource: "ipaddresspools"})

	// Start without the CRD: another test may have applied it (without Helm's ownership).
	gone := func() {
		t.Helper()
		if err := crdClient.Delete(ctx, poolCRD, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := crdClient.Get(ctx, poolCRD, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		}); err != nil {
			t.Fatalf("CRD %s not deleted: %v", poolCRD, err)
		}
	}
	gone()
	t.Cleanup(gone)

	helm := func(args ...string) {
		t.Helper()
		cmd := exec.Command(c.Helm, append(args, "--kubeconfig", env.Kubeconfig, "--namespace", ns)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	printerColumns := func() int {
		t.Helper()
		crd, err := crdClient.Get(ctx, poolCRD, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("CRD %s: %v", poolCRD, err)
		}
		versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
		cols, _, _ := unstructured.NestedSlice(versions[0].(map[string]any), "additionalPrinterColumns")
		return len(cols)
	}

	// An older chart: the same CRD without its printer columns.
	old := filepath.Join(t.TempDir(), "kcm-split")
	if out, err := exec.Command("cp", "-rL", c.Dir, old).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	crdFile := filepath.Join(old, "crds", "lb.kcm-split.io_ipaddresspools.yaml")
	b, err := os.ReadFile(crdFile)
	if err != nil {
		t.Fatal(err)
	}
	var crd map[string]any
	if err := yaml.Unmarshal(b, &crd); err != nil {
		t.Fatal(err)
	}
	unstructured.RemoveNestedField(crd, "status")
	versions, _, _ := unstructured.NestedSlice(crd, "spec", "versions")
	want := len(versions[0].(map[string]any)["additionalPrinterColumns"].([]any))
	delete(versions[0].(map[string]any), "additionalPrinterColumns")
	_ = unstructured.SetNestedSlice(crd, versions, "spec", "versions")
	b, _ = yaml.Marshal(crd)
	for _, f := range []string{crdFile, filepath.Join(old, "files", "ipaddresspools.crd.yaml")} {
		_ = os.Remove(f)
		if err := os.WriteFile(f, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	const release = "crdtest"
	t.Cleanup(func() {
		_ = exec.Command(c.Helm, "uninstall", release, "--kubeconfig", env.Kubeconfig, "--namespace", ns).Run()
	})
	// Without service-lb: no CRD (crds/ is not installed by Helm either: .helmignore).
	helm("install", release, old, "--set", "controllers.endpoints.enabled=true")
	if _, err := crdClient.Get(ctx, poolCRD, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("installed without service-lb, the CRD is there: %v", err)
	}
	// service-lb turned on with the older chart: its CRD.
	helm("upgrade", release, old, "--reuse-values", "--set", "controllers.servicelb.enabled=true")
	if n := printerColumns(); n != 0 {
		t.Fatalf("older chart's CRD has %d printer columns, want 0", n)
	}
	pool := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "lb.kcm-split.io/v1alpha1", "kind": "IPAddressPool",
		"metadata": map[string]any{"name": "crdtest-" + ns},
		"spec":     map[string]any{"addresses": []any{"192.0.2.0/28"}},
	}}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := pools.Create(ctx, pool, metav1.CreateOptions{})
		return err == nil, nil // until the CRD is established
	}); err != nil {
		t.Fatalf("creating a pool: %v", err)
	}
	// The chart upgraded: the CRD with it (what crds/ never gets).
	helm("upgrade", release, c.Dir, "--reuse-values")
	if n := printerColumns(); n != want {
		t.Errorf("after helm upgrade the CRD has %d printer columns, want the chart's %d", n, want)
	}
	// service-lb off, then the release gone: the CRD and the pool stay.
	helm("upgrade", release, c.Dir, "--reuse-values", "--set", "controllers.servicelb.enabled=false")
	if _, err := pools.Get(ctx, pool.GetName(), metav1.GetOptions{}); err != nil {
		t.Errorf("service-lb turned off: the pool is gone: %v", err)
	}
	helm("uninstall", release)
	if _, err := pools.Get(ctx, pool.GetName(), metav1.GetOptions{}); err != nil {
		t.Errorf("release uninstalled: the pool is gone: %v", err)
	}
	if n := printerColumns(); n != want {
		t.Errorf("release uninstalled: the CRD changed (%d printer columns)", n)
	}
}
