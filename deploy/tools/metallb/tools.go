//go:build tools

// Package tools pins the MetalLB release whose controller and speaker `make lb-e2e` builds into
// images (deploy/tools/build.sh, TOOLS_ONLY="metallb-controller metallb-speaker").
package tools

import (
	_ "go.universe.tf/metallb/controller"
	_ "go.universe.tf/metallb/speaker"
)
