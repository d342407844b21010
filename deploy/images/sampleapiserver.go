package main

import (
	"fmt"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// SampleAPIServerRef is the image e2e.test v1.36.3 runs as the aggregated API server of the
// Aggregator spec (test/utils/image/manifest.go: APIServer).
const SampleAPIServerRef = "registry.k8s.io/e2e-test-images/sample-apiserver:1.29.2"

// sampleAPIServerTarget wraps k8s.io/sample-apiserver's server, built by deploy/tools/build.sh
// (TOOLS_ONLY=sample-apiserver) into bin, in a one-binary image for the node's platform, as
// upstream's image runs it: entrypoint /sample-apiserver, no arguments of its own (the spec's
// Pod passes only flags), root, since it serves on port 443 (its default, which the spec's
// readiness probe and Service use).
func sampleAPIServerTarget(bin string, node []v1.Platform) (target, error) {
	abs, err := filepath.Abs(bin)
	if err != nil {
		return target{}, err
	}
	if _, err := os.Stat(abs); err != nil {
		return target{}, fmt.Errorf("-sample-apiserver: %w (TOOLS_ONLY=sample-apiserver deploy/tools/build.sh builds it)", err)
	}
	return target{
		name: "sample-apiserver", prebuilt: abs, path: "/sample-apiserver", refs: []string{SampleAPIServerRef},
		platforms: node, user: "0:0", dirs: []string{"tmp"},
	}, nil
}
