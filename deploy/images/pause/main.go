// Command pause holds a Pod's namespaces open until it is told to stop: the sandbox image of a
// node that can pull nothing. Upstream's pause is C in the kubernetes tree (not a Go package
// to import), so this is the few lines it takes in Go.
//
// It exits 0 on SIGTERM or SIGINT, and as PID 1 of a Pod sharing its process namespace it
// reaps the orphans reparented to it.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Println("kcm-split pause")
		return
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		reap()
	}
}

// reap collects every exited child without blocking.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
