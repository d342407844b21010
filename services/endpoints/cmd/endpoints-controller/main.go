// Command endpoints-controller runs kube-controller-manager's endpoints, endpointslice and
// endpointslice-mirroring controllers on their own: they keep the Endpoints and EndpointSlices
// of every Service with a selector in line with the Pods it selects, and mirror the custom
// Endpoints of Services without one into EndpointSlices.
// See --help for flags; each can also be set through a KCM_SPLIT_<FLAG> environment variable.
package main

import (
	endpointscontroller "github.com/kcm-split/kcm-split/services/endpoints"
	"github.com/kcm-split/kcm-split/shared/app"
)

func main() {
	app.Main(endpointscontroller.Spec())
}
