// Command service-lb-controller runs kube-controller-manager's service load balancer
// controller on its own, with address allocation from IPAddressPools: LoadBalancer Services
// get an address (per IP family, shareable by key) and keep it across restarts.
// See --help for flags; each can also be set through a KCM_SPLIT_<FLAG> environment variable.
package main

import (
	"github.com/kcm-split/kcm-split/services/servicelb"
	"github.com/kcm-split/kcm-split/shared/app"
)

func main() {
	app.Main(servicelb.Spec())
}
