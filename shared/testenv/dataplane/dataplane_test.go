package dataplane

import (
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A nat table as kube-proxy v1.36 writes it (iptables mode): a ClusterIP with two endpoints,
// the same Service's LoadBalancer address through its KUBE-EXT chain, and another Service on
// the same address with another port.
const natSave = `*nat
:KUBE-SERVICES - [0:0]
:KUBE-SVC-AAAA - [0:0]
:KUBE-EXT-AAAA - [0:0]
:KUBE-SEP-ONE - [0:0]
:KUBE-SEP-TWO - [0:0]
:KUBE-SVC-BBBB - [0:0]
:KUBE-SEP-THREE - [0:0]
-A KUBE-SERVICES -d 10.96.94.192/32 -p tcp -m comment --comment "e2e-web/web cluster IP" -m tcp --dport 80 -j KUBE-SVC-AAAA
-A KUBE-SERVICES -d 203.0.113.200/32 -p tcp -m comment --comment "e2e-web/web loadbalancer IP" -m tcp --dport 80 -j KUBE-EXT-AAAA
-A KUBE-SERVICES -d 10.96.94.192/32 -p tcp -m comment --comment "e2e-web/web:other cluster IP" -m tcp --dport 81 -j KUBE-SVC-BBBB
-A KUBE-EXT-AAAA -m comment --comment "masquerade traffic for e2e-web/web external destinations" -j KUBE-MARK-MASQ
-A KUBE-EXT-AAAA -j KUBE-SVC-AAAA
-A KUBE-SVC-AAAA ! -s 198.51.100.0/26 -d 10.96.94.192/32 -p tcp -m comment --comment "e2e-web/web cluster IP" -m tcp --dport 80 -j KUBE-MARK-MASQ
-A KUBE-SVC-AAAA -m comment --comment "e2e-web/web -> 198.51.100.5:8080" -m statistic --mode random --probability 0.50000000000 -j KUBE-SEP-ONE
-A KUBE-SVC-AAAA -m comment --comment "e2e-web/web -> 198.51.100.6:8080" -j KUBE-SEP-TWO
-A KUBE-SEP-ONE -s 198.51.100.5/32 -m comment --comment "e2e-web/web" -j KUBE-MARK-MASQ
-A KUBE-SEP-ONE -p tcp -m comment --comment "e2e-web/web" -m tcp -j DNAT --to-destination 198.51.100.5:8080
-A KUBE-SEP-TWO -p tcp -m comment --comment "e2e-web/web" -m tcp -j DNAT --to-destination 198.51.100.6:8080
-A KUBE-SVC-BBBB -j KUBE-SEP-THREE
-A KUBE-SEP-THREE -p tcp -m tcp -j DNAT --to-destination 198.51.100.7:9090
COMMIT
`

func TestNATTargets(t *testing.T) {
	both := []string{"198.51.100.5:8080", "198.51.100.6:8080"}
	for _, tc := range []struct {
		dst  string
		port int32
		want []string
	}{
		{"10.96.94.192", 80, both},
		{"203.0.113.200", 80, both},
		{"10.96.94.192", 81, []string{"198.51.100.7:9090"}},
		{"10.96.94.192", 8080, nil},
		{"10.96.94.19", 80, nil},
	} {
		if got := NATTargets(natSave, tc.dst, tc.port); !slices.Equal(got, tc.want) {
			t.Errorf("%s:%d: %v, want %v", tc.dst, tc.port, got, tc.want)
		}
	}
	// A Service whose endpoints are not yet written has its match but no DNAT.
	partial := strings.ReplaceAll(natSave, "-A KUBE-SEP-TWO -p tcp", "-A KUBE-SEP-TWO-GONE -p tcp")
	if got := NATTargets(partial, "10.96.94.192", 80); !slices.Equal(got, []string{"198.51.100.5:8080"}) {
		t.Errorf("one endpoint programmed: %v", got)
	}
}

func TestParseHistograms(t *testing.T) {
	page := `# HELP kubeproxy_sync_proxy_rules_duration_seconds [ALPHA] SyncProxyRules latency in seconds
# TYPE kubeproxy_sync_proxy_rules_duration_seconds histogram
kubeproxy_sync_proxy_rules_duration_seconds_bucket{le="0.001"} 0
kubeproxy_sync_proxy_rules_duration_seconds_bucket{le="0.032"} 3
kubeproxy_sync_proxy_rules_duration_seconds_bucket{le="1.024"} 9
kubeproxy_sync_proxy_rules_duration_seconds_bucket{le="+Inf"} 10
kubeproxy_sync_proxy_rules_duration_seconds_sum 4.5
kubeproxy_sync_proxy_rules_duration_seconds_count 10
kubeproxy_sync_proxy_rules_last_timestamp_seconds 1.7e+09
# TYPE kubeproxy_network_programming_duration_seconds histogram
kubeproxy_network_programming_duration_seconds_bucket{ip_family="IPv4",le="0.25"} 1
kubeproxy_network_programming_duration_seconds_bucket{ip_family="IPv4",le="2"} 3
kubeproxy_network_programming_duration_seconds_bucket{ip_family="IPv4",le="+Inf"} 3
kubeproxy_network_programming_duration_seconds_sum{ip_family="IPv4"} 2.5
kubeproxy_network_programming_duration_seconds_count{ip_family="IPv4"} 3
kubeproxy_network_programming_duration_seconds_bucket{ip_family="IPv6",le="0.25"} 1
kubeproxy_network_programming_duration_seconds_bucket{ip_family="IPv6",le="2"} 1
kubeproxy_network_programming_duration_seconds_bucket{ip_family="IPv6",le="+Inf"} 1
kubeproxy_network_programming_duration_seconds_sum{ip_family="IPv6"} 0.1
kubeproxy_network_programming_duration_seconds_count{ip_family="IPv6"} 1
`
	hs, err := ParseHistograms(strings.NewReader(page), "kubeproxy_sync_proxy_rules_duration_seconds", "kubeproxy_network_programming_duration_seconds")
	if err != nil {
		t.Fatal(err)
	}
	h := hs["kubeproxy_sync_proxy_rules_duration_seconds"]
	if h.Count != 10 || h.Sum != 4.5 || len(h.Buckets) != 4 {
		t.Fatalf("%+v", h)
	}
	if q := h.Quantile(0.5); q != 1.024 {
		t.Errorf("p50 %v, want 1.024", q)
	}
	if q := h.Quantile(0.3); q != 0.032 {
		t.Errorf("p30 %v, want 0.032", q)
	}
	if q := h.Quantile(0.99); !math.IsInf(q, 1) {
		t.Errorf("p99 %v, want +Inf", q)
	}
	// Labelled by family: the series add up.
	p := hs["kubeproxy_network_programming_duration_seconds"]
	if p.Count != 4 || math.Abs(p.Sum-2.6) > 1e-9 || p.Buckets[0.25] != 2 || p.Quantile(0.5) != 0.25 || p.Quantile(0.99) != 2 {
		t.Errorf("programming: %+v", p)
	}
	if q := hs["kubeproxy_absent_seconds"].Quantile(0.5); !math.IsNaN(q) {
		t.Errorf("absent histogram: %v, want NaN", q)
	}
}

// Each request of Client opens its own connection: the server sees as many as there were
// requests, where http.DefaultTransport would have reused one.
func TestClientOpensAConnectionPerRequest(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "ok")
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	get := func(c *http.Client) {
		resp, err := c.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		// Read to the end, as the suites do: a transport may then keep the connection.
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	for i := 0; i < 3; i++ {
		get(Client(time.Second))
	}
	c := Client(time.Second)
	for i := 0; i < 3; i++ {
		get(c)
	}
	if n := conns.Load(); n != 6 {
		t.Fatalf("%d connections for 6 requests", n)
	}
	// The control: the default transport keeps one connection for a second round.
	conns.Store(0)
	for i := 0; i < 3; i++ {
		get(&http.Client{Timeout: time.Second})
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("default transport: %d connections for 3 requests, want 1 (the test cannot tell)", n)
	}
}

// CheckRoute in a network namespace the test makes (root only): a default route's interface
// is refused, an on-link route elsewhere accepted, no route at all refused.
func TestCheckRoute(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("makes a network namespace: root only")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("no ip command")
	}
	ns := fmt.Sprintf("kcm-dp-%d", os.Getpid())
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v %s", args, err, out)
		}
	}
	run("netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	run("-n", ns, "link", "add", "up0", "type", "veth", "peer", "name", "side0")
	run("-n", ns, "addr", "add", "169.254.9.1/30", "dev", "up0")
	run("-n", ns, "addr", "add", "169.254.8.1/30", "dev", "side0")
	run("-n", ns, "link", "set", "up0", "up")
	run("-n", ns, "link", "set", "side0", "up")
	if _, err := CheckRoute(ns, "10.96.0.10"); err == nil || !strings.Contains(err.Error(), "no route") {
		t.Fatalf("no route at all: %v", err)
	}
	run("-n", ns, "route", "add", "default", "via", "169.254.9.2")
	if _, err := CheckRoute(ns, "10.96.0.10"); err == nil || !strings.Contains(err.Error(), "default route's interface") {
		t.Fatalf("by the default route: %v", err)
	}
	run("-n", ns, "route", "add", "local", "10.96.0.0/16", "dev", "lo", "table", "local")
	if r, err := CheckRoute(ns, "10.96.0.10"); err != nil {
		t.Fatalf("local route: %v (%s)", err, r)
	}
	if r, err := CheckRoute(ns, "169.254.8.2"); err != nil {
		t.Fatalf("on-link elsewhere: %v (%s)", err, r)
	}
}
