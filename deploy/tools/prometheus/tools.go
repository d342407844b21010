//go:build tools

// Package tools pins the Prometheus release whose binaries deploy/tools/build.sh builds.
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
