package servicelb_test

import (
	"k8s.io/client-go/rest"

	"github.com/kcm-split/kcm-split/services/servicelb/internal/crdtest"
)

// crdDir is where the chart ships the CRD; tests install exactly that manifest.
const crdDir = "../../charts/kcm-split/crds"

var crdGVR = crdtest.GVR

// installCRDs creates every CRD in crdDir and waits until the pool API is served.
func installCRDs(cfg *rest.Config) error { return crdtest.Install(cfg, crdDir) }
