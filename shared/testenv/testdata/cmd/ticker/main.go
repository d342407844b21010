// Command ticker prints a counter every 5ms until killed: progress a test can see in its log.
// testenv's tests freeze it to check that a frozen process makes none.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	tick := time.NewTicker(5 * time.Millisecond)
	for i := 0; ; i++ {
		select {
		case <-term:
			fmt.Println("terminated")
			return
		case <-tick.C:
			fmt.Println(i)
		}
	}
}
