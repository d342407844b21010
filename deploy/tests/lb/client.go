// Package lb holds `make lb-e2e`: LoadBalancer addresses proven by real traffic. MetalLB's
// speaker announces them in L2 mode on the real node of `make node-up`; a client in a network
// namespace of its own, joined to the node by a veth in the pool's subnet, reaches them by ARP
// alone. The controller that hands the addresses out is the parameter: MetalLB's own controller
// or service-lb from the chart reading MetalLB's pools. See e2e_test.go and e2e.sh.
package lb

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// NetnsClient sends HTTP requests from inside a network namespace. Go's net package has no
// per-dial namespace option, so each connection is opened on an OS thread of its own that
// enters the namespace first; the socket keeps that namespace for its whole life.
type NetnsClient struct {
	fd   int
	http *http.Client
}

// NewNetnsClient opens the namespace at path (e.g. /run/netns/NAME). Every request opens a new
// connection (no keep-alive), so each one goes through ARP, the speaker and kube-proxy anew.
func NewNetnsClient(path string, timeout time.Duration) (*NetnsClient, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	// The descriptor is kept open (and closed by Close): the dialling threads join through it.
	fd, err := unix.Dup(int(f.Fd()))
	f.Close()
	if err != nil {
		return nil, err
	}
	c := &NetnsClient{fd: fd}
	c.http = &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			DialContext:       c.dial,
			DisableKeepAlives: true,
			Proxy:             nil,
		},
	}
	return c, nil
}

// Close releases the namespace's descriptor.
func (c *NetnsClient) Close() error { return unix.Close(c.fd) }

type dialResult struct {
	conn net.Conn
	err  error
}

func (c *NetnsClient) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	res := make(chan dialResult, 1)
	go func() {
		// Never unlocked: the goroutine ends locked, so the runtime retires the thread rather
		// than let another goroutine run in the client's namespace.
		runtime.LockOSThread()
		if err := unix.Setns(c.fd, unix.CLONE_NEWNET); err != nil {
			res <- dialResult{err: fmt.Errorf("setns: %w", err)}
			return
		}
		// The thread's namespace must now be the client's: a request that left from the
		// node's own namespace would prove nothing about the link.
		var want, got unix.Stat_t
		if err := unix.Fstat(c.fd, &want); err != nil {
			res <- dialResult{err: err}
			return
		}
		if err := unix.Stat("/proc/thread-self/ns/net", &got); err != nil || got.Ino != want.Ino || got.Dev != want.Dev {
			res <- dialResult{err: fmt.Errorf("this thread is not in the client's network namespace (%v)", err)}
			return
		}
		var d net.Dialer
		conn, err := d.DialContext(ctx, network, addr)
		res <- dialResult{conn, err}
	}()
	select {
	case r := <-res:
		return r.conn, r.err
	case <-ctx.Done():
		go func() {
			if r := <-res; r.conn != nil {
				r.conn.Close()
			}
		}()
		return nil, ctx.Err()
	}
}

// Get fetches url and returns the body, trimmed; any status but 200 is an error.
func (c *NetnsClient) Get(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", url, resp.Status)
	}
	return strings.TrimSpace(string(b)), nil
}
