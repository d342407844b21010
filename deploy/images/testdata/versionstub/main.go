// Command versionstub stands in for kubeadm's binaries in deploy/images' tests: whatever its
// arguments, it prints the line it was built to say (-ldflags "-X main.says=...") and exits 0.
package main

import "fmt"

var says string

func main() {
	fmt.Println(says)
}
