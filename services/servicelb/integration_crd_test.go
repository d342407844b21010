package servicelb_test

import (
	"k8s.io/client-go/rest"

	"github.com/kcm-split/kcm-split/services/servicelb/api/v1alpha1"
	"github.com/kcm-split/kcm-split/shared/testenv"
)

// crdDir is where the chart ships the CRD; tests install exactly that manifest.
const crdDir = "../../charts/kcm-split/crds"

// crdName is the chart's IPAddressPool CRD.
const crdName = v1alpha1.Resource + "." + v1alpha1.Group

// installCRDs creates every CRD in crdDir and waits until the pool API is served.
func installCRDs(cfg *rest.Config) error {
	return testenv.InstallCRDs(cfg, crdDir, v1alpha1.GroupVersionResource)
}
