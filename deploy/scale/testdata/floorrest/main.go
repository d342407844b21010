// Command floorrest caches Namespaces through a REST client whose scheme holds core/v1 alone: no
// clientset, so no other API group is linked in. TestFloor sets it beside testdata/floor to show
// what linking the clientset costs. No controller here can drop it: client-go's leaderelection and
// discovery packages import the clientset, and every binary holds its own Lease.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig file")
	flag.Parse()
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	scheme := runtime.NewScheme()
	_ = corev1.AddToScheme(scheme)
	metav1.AddToGroupVersion(scheme, corev1.SchemeGroupVersion)
	codecs := serializer.NewCodecFactory(scheme)
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &corev1.SchemeGroupVersion
	c.APIPath = "/api"
	c.NegotiatedSerializer = codecs.WithoutConversion()
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	lw := cache.NewListWatchFromClient(rc, "namespaces", "", fields.Everything())
	inf := cache.NewSharedIndexInformer(lw, &corev1.Namespace{}, 0, cache.Indexers{})
	go inf.Run(ctx.Done())
	cache.WaitForCacheSync(ctx.Done(), inf.HasSynced)
	fmt.Println("synced", len(inf.GetStore().List()))
	<-ctx.Done()
}
