// Command gen writes the chart's dashboards (package dashboards) into
// charts/kcm-split/dashboards, or -out.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/kcm-split/kcm-split/deploy/tests/chart/dashboards"
)

func main() {
	out := flag.String("out", filepath.Join("..", "..", "..", "..", "charts", "kcm-split", "dashboards"), "directory the dashboards are written to")
	flag.Parse()
	files, err := dashboards.Generate()
	if err != nil {
		fmt.Fprintln(os.Stderr, "dashboards:", err)
		os.Exit(1)
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(*out, name), b, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "dashboards:", err)
			os.Exit(1)
		}
	}
}
