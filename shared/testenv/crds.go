package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// CRDResource is the CustomResourceDefinition resource, for tests that read or remove one.
var CRDResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// crdTimeout bounds the wait for a CRD's API to be served, or to be gone.
const crdTimeout = time.Minute

// InstallCRDs creates the CustomResourceDefinition of every *.yaml file in dir (one that
// exists already is left as it is), e.g. the chart's crds/, and waits until the apiserver
// serves served.
func InstallCRDs(cfg *rest.Config, dir string, served schema.GroupVersionResource) error {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no CRDs in %s: %v", dir, err)
	}
	crds := make([]map[string]any, 0, len(files))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var obj map[string]any
		if err := yaml.Unmarshal(b, &obj); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		crds = append(crds, obj)
	}
	return InstallCRD(cfg, served, crds...)
}

// InstallCRD creates each CustomResourceDefinition given as an object (one that exists
// already is left as it is) and waits until the apiserver serves served.
func InstallCRD(cfg *rest.Config, served schema.GroupVersionResource, crds ...map[string]any) error {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx := context.Background()
	for _, obj := range crds {
		crd := &unstructured.Unstructured{Object: obj}
		if _, err := dyn.Resource(CRDResource).Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating the CRD %s: %w", crd.GetName(), err)
		}
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, crdTimeout, true, func(context.Context) (bool, error) {
		list, err := dc.ServerResourcesForGroupVersion(served.GroupVersion().String())
		if err != nil {
			return false, nil
		}
		return slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == served.Resource }), nil
	})
	if err != nil {
		return fmt.Errorf("%s is not served %s after creating its CRD", served, crdTimeout)
	}
	return nil
}

// DeleteCRD deletes the CustomResourceDefinition name (and with it every object of its kind)
// and waits until it is gone.
func DeleteCRD(cfg *rest.Config, name string) error {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx := context.Background()
	if err := dyn.Resource(CRDResource).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, crdTimeout, true, func(ctx context.Context) (bool, error) {
		_, err := dyn.Resource(CRDResource).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		return fmt.Errorf("the CRD %s is still there %s after its deletion", name, crdTimeout)
	}
	return nil
}
