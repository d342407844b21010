// Command nodelifecycle-controller runs kube-controller-manager's node lifecycle controller,
// and its taint-eviction controller, on their own: it marks Nodes that stop reporting
// Unknown, keeps their condition taints, taints unreachable Nodes NoExecute at a zone-aware
// rate, and deletes the Pods that do not tolerate that taint. See --help for flags; each can
// also be set through a KCM_SPLIT_<FLAG> environment variable.
package main

import (
	"github.com/kcm-split/kcm-split/services/nodelifecycle"
	"github.com/kcm-split/kcm-split/shared/app"
)

func main() {
	app.Main(nodelifecycle.Spec())
}
