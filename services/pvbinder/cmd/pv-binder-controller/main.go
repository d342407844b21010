// Command pv-binder-controller runs kube-controller-manager's PersistentVolume binder on its
// own: it binds PersistentVolumeClaims to PersistentVolumes, hands claims to external
// provisioners, and releases volumes whose claims are gone by their reclaim policy.
// See --help for flags; each can also be set through a KCM_SPLIT_<FLAG> environment variable.
package main

import (
	"github.com/kcm-split/kcm-split/services/pvbinder"
	"github.com/kcm-split/kcm-split/shared/app"
)

func main() {
	app.Main(pvbinder.Spec())
}
