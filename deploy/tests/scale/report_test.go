package scale

import (
	"fmt"
	"strings"
	"time"

	"github.com/kcm-split/kcm-split/shared/benchkit"
)

type row struct {
	name string
	get  func(r *result, alias string) (float64, bool)
	fmt  string
}

func always(f func(*result) float64) func(*result, string) (float64, bool) {
	return func(r *result, _ string) (float64, bool) { return f(r), true }
}

func pct(p float64) func(*result, string) (float64, bool) { return pctOf(p, "") }

// pctOf is the p-th percentile of the reaction named key of alias's churn ("" its main one).
func pctOf(p float64, key string) func(*result, string) (float64, bool) {
	return func(r *result, alias string) (float64, bool) {
		if key != "" {
			alias += "/" + key
		}
		d, ok := r.churn[alias]
		if !ok || len(d) == 0 {
			return 0, false
		}
		return benchkit.Millis(benchkit.Percentile(d, p)), true
	}
}

var rows = []row{
	{"cold start -> expected state (s)", func(r *result, _ string) (float64, bool) {
		return r.coldConverged.Seconds(), r.coldConverged > 0
	}, "%.1f"},
	{"cold start -> first full pass done, CPU settled (s)", always(func(r *result) float64 { return r.coldIdle.Seconds() }), "%.1f"},
	{"cold start CPU (s)", always(func(r *result) float64 { return r.coldCPU.Seconds() }), "%.1f"},
	{"idle RSS (MiB)", always(func(r *result) float64 { return benchkit.MiB(r.idleRSS) }), "%.1f"},
	{"idle RssAnon (MiB)", always(func(r *result) float64 { return benchkit.MiB(r.idleAnon) }), "%.1f"},
	{"loaded RSS, max under churn (MiB)", always(func(r *result) float64 { return benchkit.MiB(r.loadedRSS) }), "%.1f"},
	{"peak RSS, VmHWM (MiB)", always(func(r *result) float64 { return benchkit.MiB(r.peakRSS) }), "%.1f"},
	{"idle CPU (millicores)", always(func(r *result) float64 { return r.idleMilli }), "%.1f"},
	{"idle requests/s (no watch, no Lease)", always(func(r *result) float64 { return r.idleReqPerS }), "%.2f"},
	{"idle writes/s (no Lease)", always(func(r *result) float64 { return r.idleWritesPS }), "%.2f"},
	{"churn reaction p50 (ms)", pct(50), "%.0f"},
	{"churn reaction p99 (ms)", pct(99), "%.0f"},
	{"churn reaction in EndpointSlices p50 (ms)", pctOf(50, "slices"), "%.0f"},
	{"churn reaction in EndpointSlices p99 (ms)", pctOf(99, "slices"), "%.0f"},
	{"churn flips sent per s (asked: 50)", func(r *result, alias string) (float64, bool) {
		v, ok := r.churnRate[alias]
		return v, ok
	}, "%.1f"},
	{"churn CPU (s)", always(func(r *result) float64 { return r.churnCPU.Seconds() }), "%.1f"},
	{"Lease renewals per 10 s under churn (retry period 2 s: 5)", always(func(r *result) float64 { return float64(r.leaseRenewals) / r.churnSeconds * 10 }), "%.1f"},
}

func cell(format string, v float64, ok bool) string {
	if !ok {
		return "n/a"
	}
	return fmt.Sprintf(format, v)
}

func report(sz size, results map[string][2]*result, all *result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Size %s: %d Nodes (+%d whose Lease the harness renews), %d Pods, %d Services, %d namespaces, %d ConfigMaps, %d PV/PVC pairs\n\n",
		sz.name, sz.nodes, sz.failingNodes, sz.pods(), sz.services, sz.namespaces, sz.configMaps, sz.pvPairs)
	fmt.Fprintf(&b, "Run at %s.\n\n", time.Now().UTC().Format(time.RFC3339))
	var sumIdle, sumPeak float64
	for _, ctl := range controllers {
		pair, ok := results[ctl.alias]
		if !ok {
			continue
		}
		fmt.Fprintf(&b, "### %s (upstream: `--controllers=%s`)\n\n", ctl.binary, cmpOr(ctl.upstream, "none: no counterpart without a cloud provider"))
		if ctl.churn != "" {
			fmt.Fprintf(&b, "Churn: %s.\n\n", ctl.churn)
		}
		fmt.Fprintf(&b, "| row | %s | upstream, same controllers | ratio | upstream, every controller |\n|---|---|---|---|---|\n", ctl.binary)
		for _, rw := range rows {
			o, ook := get(pair[0], rw, ctl.alias)
			u, uok := get(pair[1], rw, ctl.alias)
			a, aok := get(all, rw, ctl.alias)
			ratio := "n/a"
			if ook && uok {
				ratio = benchkit.Ratio(o, u)
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", rw.name, cell(rw.fmt, o, ook), cell(rw.fmt, u, uok), ratio, cell(rw.fmt, a, aok))
		}
		b.WriteString("\n")
		if pair[0] != nil {
			sumIdle += benchkit.MiB(pair[0].idleRSS)
			sumPeak += benchkit.MiB(pair[0].peakRSS)
		}
	}
	if all != nil {
		fmt.Fprintf(&b, "### Sum of the six binaries vs upstream's one process with every controller on\n\n")
		fmt.Fprintf(&b, "| | six kcm-split binaries (sum) | kube-controller-manager, every controller | ratio |\n|---|---|---|---|\n")
		fmt.Fprintf(&b, "| idle RSS (MiB) | %.1f | %.1f | %s |\n", sumIdle, benchkit.MiB(all.idleRSS), benchkit.Ratio(sumIdle, benchkit.MiB(all.idleRSS)))
		fmt.Fprintf(&b, "| peak RSS, VmHWM (MiB) | %.1f | %.1f | %s |\n\n", sumPeak, benchkit.MiB(all.peakRSS), benchkit.Ratio(sumPeak, benchkit.MiB(all.peakRSS)))
	}
	return b.String()
}

func get(r *result, rw row, alias string) (float64, bool) {
	if r == nil {
		return 0, false
	}
	return rw.get(r, alias)
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func jsonResults(results map[string][2]*result, all *result) map[string]any {
	out := map[string]any{}
	conv := func(r *result, alias string) map[string]any {
		if r == nil {
			return nil
		}
		m := map[string]any{}
		for _, rw := range rows {
			if v, ok := rw.get(r, alias); ok {
				m[rw.name] = v
			}
		}
		return m
	}
	for alias, pair := range results {
		out[alias] = map[string]any{"ours": conv(pair[0], alias), "upstream": conv(pair[1], alias), "upstreamAll": conv(all, alias)}
	}
	return out
}
