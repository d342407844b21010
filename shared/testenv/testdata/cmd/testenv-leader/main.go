// Command testenv-leader is the smallest kcm-split controller: it leads, reports synced and
// waits. testenv's tests run it to check Binary and StartLeading against the real apiserver.
package main

import (
	"context"

	"github.com/kcm-split/kcm-split/shared/app"
)

func main() {
	app.Main(app.Spec{
		ID:    "testenv-leader",
		Usage: "leads and does nothing",
		Run: func(ctx context.Context, rt *app.Runtime) error {
			rt.SetSynced(func() bool { return true })
			<-ctx.Done()
			return nil
		},
	})
}
