// Command floor is the smallest client-go program that does what namespace-controller's cache
// does (a Namespace informer from the typed clientset) and nothing else: no metrics, no health
// server, no leader election, no logging set-up. TestFloor measures its memory beside the
// controllers' as the floor any client-go binary starts from.
package main

import (
	"fmt"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"

	"github.com/kcm-split/kcm-split/deploy/tests/scale/testdata/floorstart"
)

func main() {
	cfg, ctx, cancel := floorstart.Start()
	defer cancel()
	client, err := kubernetes.NewForConfig(cfg)
	floorstart.Check(err)
	factory := informers.NewSharedInformerFactory(client, 0)
	factory.Core().V1().Namespaces().Informer()
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	fmt.Println("synced")
	<-ctx.Done()
	factory.Shutdown()
}
