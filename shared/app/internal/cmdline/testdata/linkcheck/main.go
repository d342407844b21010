// Command linkcheck is the smallest binary built the way every controller is: app.Main with
// a Spec whose Run builds typed informers. TestNoReflectMethodLookup inspects what it links.
package main

import (
	"context"

	"k8s.io/client-go/informers"

	"github.com/kcm-split/kcm-split/shared/app"
)

func main() {
	app.Main(app.Spec{
		ID:    "linkcheck",
		Usage: "link check",
		Run: func(ctx context.Context, rt *app.Runtime) error {
			f := informers.NewSharedInformerFactory(rt.Client, rt.ResyncPeriod())
			f.Core().V1().Nodes().Informer()
			f.Start(ctx.Done())
			<-ctx.Done()
			f.Shutdown()
			return nil
		},
	})
}
