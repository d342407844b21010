// Package floorstart is what the floor programs share: the kubeconfig flag, and a context that
// ends on SIGINT or SIGTERM. It imports no typed client, so it adds nothing to their links.
package floorstart

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Start parses the flags and returns the client config and the program's context.
func Start() (*rest.Config, context.Context, context.CancelFunc) {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig file")
	flag.Parse()
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	Check(err)
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	return cfg, ctx, cancel
}

// Check ends the program on an error.
func Check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
