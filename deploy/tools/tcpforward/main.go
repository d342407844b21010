// Command tcpforward accepts TCP connections on one address and relays each, byte for byte, to
// another. The local real node (deploy/local/node-up.sh) runs it so that Pods on the Pod network
// reach the loopback-only kube-apiserver: the "kubernetes" Service's endpoint is
// <node IP>:<port>, which this process relays to 127.0.0.1:<port>. TLS passes through untouched.
//
// Usage: tcpforward -listen 10.200.0.1:6443 -to 127.0.0.1:6443
package main

import (
	"flag"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	listen := flag.String("listen", "", "address to accept connections on (host:port)")
	to := flag.String("to", "", "address every connection is relayed to (host:port)")
	flag.Parse()
	if *listen == "" || *to == "" {
		log.Fatal("tcpforward: -listen and -to are required")
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("tcpforward: %v", err)
	}
	log.Printf("tcpforward: relaying %s to %s", ln.Addr(), *to)
	// SIGTERM closes the listener; relays in flight end with their peers.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sig
		_ = ln.Close()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			log.Printf("tcpforward: stopped: %v", err)
			return
		}
		go relay(c, *to)
	}
}

// relay copies both ways until either side closes, then closes both.
func relay(c net.Conn, to string) {
	defer c.Close()
	u, err := net.DialTimeout("tcp", to, 5*time.Second)
	if err != nil {
		log.Printf("tcpforward: %s: %v", c.RemoteAddr(), err)
		return
	}
	defer u.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(u, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, u); done <- struct{}{} }()
	<-done
}
