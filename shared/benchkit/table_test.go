package benchkit

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

func TestPercentileNearestRank(t *testing.T) {
	ms := func(n ...int) []time.Duration {
		out := make([]time.Duration, len(n))
		for i, v := range n {
			out[i] = time.Duration(v) * time.Millisecond
		}
		return out
	}
	// 1..100 shuffled: the nearest-rank p-th percentile of 100 samples is the p-th smallest.
	var hundred []time.Duration
	for i := range 100 {
		hundred = append(hundred, time.Duration((i*37)%100+1)*time.Millisecond)
	}
	tests := []struct {
		name string
		d    []time.Duration
		p    float64
		want time.Duration
	}{
		{"empty", nil, 50, 0},
		{"one sample", ms(7), 99, 7 * time.Millisecond},
		{"p50 of 4 is the 2nd", ms(40, 10, 30, 20), 50, 20 * time.Millisecond},
		{"p0 is the minimum", ms(40, 10, 30, 20), 0, 10 * time.Millisecond},
		{"p100 is the maximum", ms(40, 10, 30, 20), 100, 40 * time.Millisecond},
		{"p99 of 100 is the 99th", hundred, 99, 99 * time.Millisecond},
		{"p90 of 100 is the 90th", hundred, 90, 90 * time.Millisecond},
		{"p99 of 500 is the 5th slowest", ms(seq(500)...), 99, 495 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := append([]time.Duration(nil), tt.d...)
			if got := Percentile(tt.d, tt.p); got != tt.want {
				t.Errorf("Percentile(p%v) = %v, want %v", tt.p, got, tt.want)
			}
			for i := range before {
				if before[i] != tt.d[i] {
					t.Fatal("Percentile reordered its input")
				}
			}
		})
	}
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i + 1
	}
	return out
}

func TestRatio(t *testing.T) {
	tests := []struct {
		ours, upstream float64
		want           string
	}{
		{56.3, 92.9, "0.61"},
		{200, 200, "1.00"},
		{0, 0, "="},
		{3, 0, "inf"},
		{0, 4, "0.00"},
		{NotMeasured, 1, "n/a"},
		{1, NotMeasured, "n/a"},
	}
	for _, tt := range tests {
		if got := Ratio(tt.ours, tt.upstream); got != tt.want {
			t.Errorf("Ratio(%v, %v) = %q, want %q", tt.ours, tt.upstream, got, tt.want)
		}
	}
}

type fakeResult struct {
	rss      int64
	flips    []time.Duration
	optional float64
}

func TestCompareTable(t *testing.T) {
	var rows Rows[fakeResult]
	rows.AddMiB("idle RSS (MiB)", func(r *fakeResult) int64 { return r.rss })
	rows.AddPercentiles("flip latency", func(r *fakeResult) []time.Duration { return r.flips }, "%.1f", 50, 100)
	rows.Add("huge scenario (s)", func(r *fakeResult) float64 { return r.optional }, "%.0f")
	ours := &fakeResult{rss: 59 << 20, flips: []time.Duration{3900 * time.Microsecond, time.Second}, optional: 56}
	upstream := &fakeResult{rss: 93 << 20, flips: []time.Duration{4200 * time.Microsecond}, optional: NotMeasured}
	var buf bytes.Buffer
	Compare("endpoints-controller", Upstream, ours, upstream, rows).Write(&buf)
	want := strings.Join([]string{
		"metric                  endpoints-controller   kube-controller-manager   ours/upstream",
		"---------------------  ---------------------  ------------------------  --------------",
		"idle RSS (MiB)                          59.0                      93.0            0.63",
		"flip latency p50 (ms)                    3.9                       4.2            0.93",
		"flip latency max (ms)                 1000.0                       4.2          238.10",
		"huge scenario (s)                         56                       n/a             n/a",
		"",
	}, "\n")
	if got := buf.String(); got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}

	// A skipped side prints n/a everywhere in its column and in the ratios.
	buf.Reset()
	Compare("endpoints-controller", Upstream, ours, nil, rows).Write(&buf)
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n")[2:] {
		if f := strings.Fields(line); f[len(f)-1] != "n/a" || f[len(f)-2] != "n/a" {
			t.Errorf("row with upstream skipped: %q", line)
		}
	}
}

func TestTableWidensToItsCells(t *testing.T) {
	var buf bytes.Buffer
	tab := Table{Headings: []string{"defaults", "qps-20"}}
	results := []*fakeResult{{flips: []time.Duration{3200 * time.Microsecond}}, nil}
	tab.AddRow("floor p50/p99", Cells(results, func(r *fakeResult) string { return MS(r.flips[0]) + " / 5.5ms / 7.7ms" })...)
	if got := tab.Rows[0]; got[1] != "3.2ms / 5.5ms / 7.7ms" || got[2] != "n/a" {
		t.Errorf("row %q", got)
	}
	tab.Write(&buf)
	lines := strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("want 3 lines, got %q", buf.String())
	}
	for _, l := range lines {
		if len(l) != len(lines[2]) {
			t.Errorf("lines not aligned:\n%s", buf.String())
		}
	}
}

func TestLines(t *testing.T) {
	results := []*fakeResult{{rss: 59 << 20, flips: []time.Duration{3200 * time.Microsecond}}, nil, {rss: 61 << 20}}
	var buf bytes.Buffer
	Lines([]string{"defaults", "qps-20", "qps-100"}, results,
		Line[fakeResult]{"RSS (MiB)", func(r *fakeResult) string { return fmt.Sprintf("%.0f", MiB(r.rss)) }},
		Line[fakeResult]{"flips", func(r *fakeResult) string { return fmt.Sprint(len(r.flips)) }},
	).Write(&buf)
	want := strings.Join([]string{
		"metric           defaults          qps-20         qps-100",
		"---------  --------------  --------------  --------------",
		"RSS (MiB)              59             n/a              61",
		"flips                   1             n/a               0",
		"",
	}, "\n")
	if got := buf.String(); got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
}

func TestProgressStampsLines(t *testing.T) {
	var buf bytes.Buffer
	stderr = &buf
	t.Cleanup(func() { stderr = os.Stderr })
	Progress("quota-controller")("cold sync: %s", MS(1500*time.Microsecond))
	if got := buf.String(); !strings.HasPrefix(got, "bench quota-controller") || !strings.HasSuffix(got, "cold sync: 1.5ms\n") {
		t.Errorf("progress line %q", got)
	}
}

func TestColdStartRows(t *testing.T) {
	type res struct{ cold ColdStart }
	var rows Rows[res]
	rows.AddColdStart(func(r *res) *ColdStart { return &r.cold }, "Endpoints", 200)
	r := &res{cold: ColdStart{Floor: []time.Duration{3 * time.Millisecond}, Setup: 4 * time.Second, Sync: 8730 * time.Millisecond,
		Writes: 200, CPU: 650 * time.Millisecond, IdleRSS: 56 << 20, IdleAnon: 20 << 20}}
	var got []string
	for _, row := range rows {
		got = append(got, row.Name+" = "+Cell(row.Format, row.Value(r)))
	}
	want := []string{
		"floor latency p50 (ms) = 3.0",
		"floor latency p99 (ms) = 3.0",
		"fixture setup, context (s) = 4.0",
		"cold sync (s) = 8.73",
		"cold sync Endpoints writes (target 200) = 200",
		"cold sync CPU (s) = 0.65",
		"idle RSS (MiB) = 56.0",
		"  of which anonymous, RssAnon (MiB) = 20.0",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
