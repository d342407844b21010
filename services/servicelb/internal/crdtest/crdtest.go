// Package crdtest installs the CRDs the chart ships on a test control plane, for the
// integration tests and the benchmark alike: both run against exactly that manifest.
package crdtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
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

	"github.com/kcm-split/kcm-split/services/servicelb/api/v1alpha1"
)

// GVR is the CustomResourceDefinition resource, for tests that remove the CRD again.
var GVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// Install creates every CRD in dir (one that already exists is left as it is) and waits until
// the IPAddressPool API is served.
func Install(cfg *rest.Config, dir string) error {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no CRDs in %s: %v", dir, err)
	}
	ctx := context.Background()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var obj map[string]any
		if err := yaml.Unmarshal(b, &obj); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if _, err := dyn.Resource(GVR).Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating the CRD in %s: %w", f, err)
		}
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		list, err := dc.ServerResourcesForGroupVersion(v1alpha1.GroupVersionResource.GroupVersion().String())
		if err != nil {
			return false, nil
		}
		for _, r := range list.APIResources {
			if r.Name == v1alpha1.Resource {
				return true, nil
			}
		}
		return false, nil
	})
}
