// Command kcm-split-plan reads a running kube-controller-manager (its kubeadm static Pod
// manifest, or its Pods through the API) and prints the kcm-split chart values that carry its
// flags over to the binaries replacing its controllers, and the --controllers value (as a
// kubeadm ClusterConfiguration entry) that turns those controllers off in it. See --help.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/kcm-split/kcm-split/deploy/kubeadm/plan"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := plan.Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
