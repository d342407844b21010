// Command quota-controller runs kube-controller-manager's resource quota controller on its own:
// it keeps the status (hard limits and observed usage) of every ResourceQuota up to date.
// See --help for flags; each can also be set through a KCM_SPLIT_<FLAG> environment variable.
package main

import (
	"github.com/kcm-split/kcm-split/services/quota"
	"github.com/kcm-split/kcm-split/shared/app"
)

func main() {
	app.Main(quota.Spec())
}
