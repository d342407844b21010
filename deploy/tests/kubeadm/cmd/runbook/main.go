// Command runbook prints command blocks of the chart README's kubeadm runbook (the blocks
// marked `<!-- kubeadm-e2e: ID -->`, as `make kubeadm-e2e` runs them) as one bash script: `set
// -euo pipefail`, the helpers block, then the blocks named, in the order given. Scripts outside
// the Go e2e (make conformance-full) run the runbook's steps with it, with the runbook's
// settings (KUBECONFIG NS RELEASE CHART CONTROLLERS WORK) in their environment, instead of
// keeping a second copy of the commands.
//
// Usage: go run ./cmd/runbook [-readme charts/kcm-split/README.md] BLOCK...
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/kcm-split/kcm-split/deploy/tests/kubeadm"
)

func main() {
	readme := flag.String("readme", "charts/kcm-split/README.md", "the README holding the runbook")
	flag.Parse()
	script, err := render(*readme, flag.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, "runbook:", err)
		os.Exit(1)
	}
	fmt.Print(script)
}

// render is the script of blocks (after the helpers) of the runbook in readme.
func render(readme string, blocks []string) (string, error) {
	if len(blocks) == 0 {
		return "", fmt.Errorf("name at least one block")
	}
	rb, err := kubeadm.ReadRunbook(readme)
	if err != nil {
		return "", err
	}
	last := len(blocks) - 1
	return rb.Script(blocks[last], append([]string{"helpers"}, blocks[:last]...)...)
}
