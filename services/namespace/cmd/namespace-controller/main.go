// Command namespace-controller runs kube-controller-manager's namespace controller on its
// own: it deletes everything in a deleted namespace, Pods first, then finalizes it.
// See --help for flags; each can also be set through a KCM_SPLIT_<FLAG> environment variable.
package main

import (
	"github.com/kcm-split/kcm-split/services/namespace"
	"github.com/kcm-split/kcm-split/shared/app"
)

func main() {
	app.Main(namespace.Spec())
}
