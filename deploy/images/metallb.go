package main

import (
	"fmt"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Names of MetalLB v0.15.2's own images, so manifests written for MetalLB find them on the node.
const (
	MetalLBControllerRef = "quay.io/metallb/controller:v0.15.2"
	MetalLBSpeakerRef    = "quay.io/metallb/speaker:v0.15.2"
)

// metallbTargets wraps MetalLB's controller and speaker, built by deploy/tools/build.sh from
// the Go module proxy into dir (metallb-controller, metallb-speaker), in one-layer images for
// the node's platform. The controller runs unprivileged, as MetalLB's manifests run it; the
// speaker as root, since it answers ARP on raw sockets (its Pod adds NET_RAW).
func metallbTargets(dir string, node []v1.Platform) ([]target, error) {
	var ts []target
	for _, m := range []struct{ bin, path, ref, user string }{
		{"metallb-controller", "/controller", MetalLBControllerRef, "65534:65534"},
		{"metallb-speaker", "/speaker", MetalLBSpeakerRef, "0:0"},
	} {
		bin, err := filepath.Abs(filepath.Join(dir, m.bin))
		if err != nil {
			return nil, err
		}
		if _, err := os.Stat(bin); err != nil {
			return nil, fmt.Errorf("-metallb %s: %w (TOOLS_ONLY=%q deploy/tools/build.sh builds it)", dir, err, m.bin)
		}
		ts = append(ts, target{name: m.bin, prebuilt: bin, path: m.path, refs: []string{m.ref}, platforms: node, user: m.user})
	}
	return ts, nil
}
