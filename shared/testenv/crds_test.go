package testenv

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

const widgetCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.testenv.kcm-split.example.com
spec:
  group: testenv.kcm-split.example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`

// A CRD installed from a directory is served when InstallCRDs returns (a second install of
// the same directory is no error); after DeleteCRD its API and its objects are gone.
func TestInstallAndDeleteCRD(t *testing.T) {
	Require(t, env)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "widgets.yaml"), []byte(widgetCRD), 0o600); err != nil {
		t.Fatal(err)
	}
	widgets := schema.GroupVersionResource{Group: "testenv.kcm-split.example.com", Version: "v1", Resource: "widgets"}
	for range 2 {
		if err := InstallCRDs(env.Config, dir, widgets); err != nil {
			t.Fatal(err)
		}
	}
	dyn := dynamic.NewForConfigOrDie(env.Config)
	ns := env.Namespace(t)
	w := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "testenv.kcm-split.example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "w"}}}
	if _, err := dyn.Resource(widgets).Namespace(ns).Create(context.Background(), w, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating a Widget right after InstallCRDs: %v", err)
	}
	if err := DeleteCRD(env.Config, "widgets.testenv.kcm-split.example.com"); err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(widgets).Namespace(ns).Get(context.Background(), "w", metav1.GetOptions{}); err == nil {
		t.Fatal("the Widget is still there after DeleteCRD")
	}
	if err := InstallCRDs(env.Config, t.TempDir(), widgets); err == nil || !strings.Contains(err.Error(), "no CRDs") {
		t.Fatalf("InstallCRDs of an empty directory = %v, want an error", err)
	}
}
