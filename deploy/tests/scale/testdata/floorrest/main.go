// Command floorrest caches Namespaces through a REST client whose scheme holds core/v1 alone: no
// clientset, so no other API group is linked in. TestFloor sets it beside testdata/floor to show
// what linking the clientset costs. No controller here can drop it: client-go's leaderelection and
// discovery packages import the clientset, and every binary holds its own Lease.
package main

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/kcm-split/kcm-split/deploy/tests/scale/testdata/floorstart"
)

func main() {
	cfg, ctx, cancel := floorstart.Start()
	defer cancel()
	scheme := runtime.NewScheme()
	floorstart.Check(corev1.AddToScheme(scheme))
	metav1.AddToGroupVersion(scheme, corev1.SchemeGroupVersion)
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &corev1.SchemeGroupVersion
	c.APIPath = "/api"
	c.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	rc, err := rest.RESTClientFor(c)
	floorstart.Check(err)
	lw := cache.NewListWatchFromClient(rc, "namespaces", "", fields.Everything())
	inf := cache.NewSharedIndexInformer(lw, &corev1.Namespace{}, 0, cache.Indexers{})
	go inf.Run(ctx.Done())
	cache.WaitForCacheSync(ctx.Done(), inf.HasSynced)
	fmt.Println("synced", len(inf.GetStore().List()))
	<-ctx.Done()
}
