// Package dataplane is for the end-to-end suites on a real node: before a test sends to a
// ClusterIP or a LoadBalancer address it checks that the route to it stays on the machine
// (deploy/local/netguard.sh) and waits until kube-proxy has programmed it, and every request it
// sends opens a connection of its own.
//
// Hand-written: kube-proxy's reading of its own rules is internal to k8s.io/kubernetes/pkg/proxy;
// what a test needs is what iptables-save prints, followed from the Service's match to the DNAT
// targets.
package dataplane

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Client returns an HTTP client whose every request opens a new connection and never goes
// through a proxy from the environment: a poll that waits for a network rule must not reuse
// a connection that an earlier try made before the rule existed.
func Client(timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{
		Proxy:             nil,
		DisableKeepAlives: true,
		DialContext:       (&net.Dialer{Timeout: timeout}).DialContext,
	}}
}

// CheckRoute fails unless the route to ip, in network namespace netns ("" for the machine's
// own), leaves by no interface of a default route there: a request to ip then cannot leave the
// machine whatever kube-proxy has programmed. It returns the route it found.
func CheckRoute(netns, ip string) (string, error) {
	ipCmd := func(args ...string) (string, error) {
		if netns != "" {
			args = append([]string{"-n", netns}, args...)
		}
		out, err := exec.Command("ip", args...).CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
		return strings.TrimSpace(string(out)), nil
	}
	fam := "-4"
	if strings.Contains(ip, ":") {
		fam = "-6"
	}
	route, err := ipCmd(fam, "-o", "route", "get", ip)
	if err != nil {
		return "", fmt.Errorf("no route to %s on the machine (%v): nothing is sent", ip, err)
	}
	defaults, err := ipCmd(fam, "-o", "route", "show", "default")
	if err != nil {
		return "", err
	}
	dev := fieldAfter(route, "dev")
	for _, d := range strings.Split(defaults, "\n") {
		if d != "" && fieldAfter(d, "dev") == dev {
			return route, fmt.Errorf("the route to %s leaves by %s, the default route's interface (%q): "+
				"the network guard's routes are missing (make up sets them as root, deploy/local/netguard.sh); nothing is sent", ip, dev, route)
		}
	}
	return route, nil
}

func fieldAfter(line, key string) string {
	f := strings.Fields(line)
	for i := 0; i+1 < len(f); i++ {
		if f[i] == key {
			return f[i+1]
		}
	}
	return ""
}

// NATTargets returns the sorted DNAT targets ("ip:port") that the nat rules in save (the output
// of iptables-save -t nat) send dst:port to, following kube-proxy's chains from KUBE-SERVICES.
func NATTargets(save, dst string, port int32) []string {
	chains := map[string][]string{}
	for _, l := range strings.Split(save, "\n") {
		f := strings.Fields(l)
		if len(f) > 2 && f[0] == "-A" {
			chains[f[1]] = append(chains[f[1]], l)
		}
	}
	host := dst + "/32"
	if strings.Contains(dst, ":") {
		host = dst + "/128"
	}
	var queue []string
	for _, l := range chains["KUBE-SERVICES"] {
		if fieldAfter(l, "-d") == host && fieldAfter(l, "--dport") == strconv.Itoa(int(port)) {
			queue = append(queue, fieldAfter(l, "-j"))
		}
	}
	seen := map[string]bool{}
	var targets []string
	for len(queue) > 0 {
		c := queue[0]
		queue = queue[1:]
		if seen[c] || !strings.HasPrefix(c, "KUBE-") || strings.HasPrefix(c, "KUBE-MARK-") {
			continue
		}
		seen[c] = true
		for _, l := range chains[c] {
			if to := fieldAfter(l, "--to-destination"); fieldAfter(l, "-j") == "DNAT" && to != "" {
				targets = append(targets, to)
			} else if j := fieldAfter(l, "-j"); j != "" {
				queue = append(queue, j)
			}
		}
	}
	sort.Strings(targets)
	return slices.Compact(targets)
}

// WaitProgrammed polls the machine's nat rules until kube-proxy sends dst:port to exactly want
// ("ip:port" each), and returns how long that took. On timeout the error names what it saw.
func WaitProgrammed(ctx context.Context, dst string, port int32, want []string, timeout time.Duration) (time.Duration, error) {
	want = slices.Clone(want)
	sort.Strings(want)
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var got []string
	for {
		out, err := exec.CommandContext(ctx, "iptables-save", "-t", "nat").Output()
		if err == nil {
			got = NATTargets(string(out), dst, port)
			if slices.Equal(got, want) {
				return time.Since(start), nil
			}
		}
		select {
		case <-ctx.Done():
			return time.Since(start), fmt.Errorf("kube-proxy has not programmed %s:%d -> %v within %s (its nat rules lead to %v; last error %v)",
				dst, port, want, timeout, got, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Histogram is one Prometheus histogram of a metrics page: cumulative counts per upper bound.
type Histogram struct {
	Count   float64
	Sum     float64
	Buckets map[float64]float64
}

// Quantile is the upper bound of the first bucket holding the q-th observation (+Inf when
// beyond the last finite bound, NaN without observations).
func (h Histogram) Quantile(q float64) float64 {
	if h.Count == 0 {
		return math.NaN()
	}
	bounds := make([]float64, 0, len(h.Buckets))
	for b := range h.Buckets {
		bounds = append(bounds, b)
	}
	sort.Float64s(bounds)
	for _, b := range bounds {
		if h.Buckets[b] >= q*h.Count {
			return b
		}
	}
	return math.Inf(1)
}

// ParseHistograms reads the histograms named in names from a text metrics page; the series of
// one histogram (kube-proxy labels them by ip_family) are added up.
func ParseHistograms(page io.Reader, names ...string) (map[string]Histogram, error) {
	hs := map[string]Histogram{}
	sc := bufio.NewScanner(page)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "#") {
			continue
		}
		series, val, ok := strings.Cut(l, " ")
		if !ok {
			continue
		}
		metric, labels, _ := strings.Cut(series, "{")
		for _, n := range names {
			suffix, ok := strings.CutPrefix(metric, n+"_")
			if !ok {
				continue
			}
			v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
			if err != nil {
				return nil, fmt.Errorf("%q: %v", l, err)
			}
			h := hs[n]
			if h.Buckets == nil {
				h.Buckets = map[float64]float64{}
			}
			switch suffix {
			case "sum":
				h.Sum += v
			case "count":
				h.Count += v
			case "bucket":
				_, le, ok := strings.Cut(labels, `le="`)
				if !ok {
					return nil, fmt.Errorf("%q: a bucket without le", l)
				}
				le, _, _ = strings.Cut(le, `"`)
				b, err := strconv.ParseFloat(le, 64)
				if err != nil {
					return nil, fmt.Errorf("%q: %v", l, err)
				}
				h.Buckets[b] += v
			}
			hs[n] = h
		}
	}
	return hs, sc.Err()
}

// ProxyLatency reads kube-proxy's metrics page at url and says how long its rule syncs and
// its programming (a Service or endpoint change until its rules are in place) took: count,
// mean and p99 (a bucket's upper bound) of each histogram.
func ProxyLatency(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := Client(5 * time.Second).Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: status %d", url, resp.StatusCode)
	}
	const sync, prog = "kubeproxy_sync_proxy_rules_duration_seconds", "kubeproxy_network_programming_duration_seconds"
	hs, err := ParseHistograms(resp.Body, sync, prog)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, n := range []string{sync, prog} {
		h := hs[n]
		mean := math.NaN()
		if h.Count > 0 {
			mean = h.Sum / h.Count
		}
		fmt.Fprintf(&b, "%s count=%g mean=%.3fs p99<=%gs; ", n, h.Count, mean, h.Quantile(0.99))
	}
	return strings.TrimSuffix(b.String(), "; "), nil
}
