package benchkit

import (
	"bytes"
	"context"
	"errors"
	"math"
	"os"
	"slices"
	"strings"
	"sync/atomic"
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

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestParseStatCPU(t *testing.T) {
	// utime 1234 + stime 567 ticks of 10 ms; the command name holds spaces and parentheses.
	got, err := ParseStatCPU(fixture(t, "stat"))
	if err != nil {
		t.Fatal(err)
	}
	if want := 18010 * time.Millisecond; got != want {
		t.Errorf("ParseStatCPU = %v, want %v", got, want)
	}
	for _, bad := range []string{"", "1 (x) S 1 2 3", "1 (x) S 1 2 3 4 5 6 7 8 9 10 x 12 13"} {
		if _, err := ParseStatCPU([]byte(bad)); err == nil {
			t.Errorf("ParseStatCPU(%q): no error", bad)
		}
	}
}

func TestParseStatus(t *testing.T) {
	want := Memory{RSS: 95232 << 10, HWM: 98304 << 10, Anon: 49560 << 10}
	if got, err := ParseStatus(fixture(t, "status")); err != nil || got != want {
		t.Errorf("ParseStatus = %+v, %v; want %+v", got, err, want)
	}
	if _, err := ParseStatus([]byte("Name:\tzombie\nState:\tZ (zombie)\n")); err == nil {
		t.Error("a status without VmRSS parsed")
	}
	if _, err := ParseStatus([]byte("VmRSS:\t  lots kB\n")); err == nil {
		t.Error("a malformed VmRSS parsed")
	}
}

// The live /proc of this test process parses too: the fixture is not all the parser knows.
func TestReadOwnProcess(t *testing.T) {
	pid := os.Getpid()
	if _, err := ReadCPU(pid); err != nil {
		t.Fatal(err)
	}
	m, err := ReadMemory(pid)
	if err != nil {
		t.Fatal(err)
	}
	if m.RSS <= 0 || m.HWM < m.RSS || m.Anon <= 0 || m.Anon > m.RSS {
		t.Errorf("implausible memory of this process: %+v", m)
	}
}

func TestParallel(t *testing.T) {
	var sum atomic.Int64
	if err := Parallel(context.Background(), 100, 7, func(_ context.Context, i int) error {
		sum.Add(int64(i))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if sum.Load() != 4950 {
		t.Errorf("sum of indexes = %d, want 4950: some index ran twice or never", sum.Load())
	}

	boom := errors.New("boom")
	var ran atomic.Int64
	err := Parallel(context.Background(), 10000, 4, func(_ context.Context, i int) error {
		ran.Add(1)
		if i == 10 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) {
		t.Errorf("Parallel = %v, want %v", err, boom)
	}
	if ran.Load() == 10000 {
		t.Error("Parallel went on after an error")
	}
}

func TestUpstreamArgsLetExtraOverride(t *testing.T) {
	args := UpstreamArgs("/k", "endpoints-controller", "--secure-port=10257")
	last := map[string]string{}
	for _, a := range args {
		k, v, _ := strings.Cut(a, "=")
		last[k] = v
	}
	if last["--secure-port"] != "10257" || last["--controllers"] != "endpoints-controller" || last["--kubeconfig"] != "/k" {
		t.Errorf("UpstreamArgs = %q", args)
	}
	if !math.IsNaN(NotMeasured) {
		t.Fatal("NotMeasured must be NaN")
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

func TestSidesComposeFlags(t *testing.T) {
	ours := Ours("x-controller", "example.com/cmd/x-controller", "--a=1")
	if ours.Name != "x-controller" || ours.UserAgent != "x-controller/" || ours.Label() != "x-controller" {
		t.Errorf("Ours = %+v", ours)
	}
	first, err := ours.Args("/kc", "--b=2")
	if err != nil {
		t.Fatal(err)
	}
	second, _ := ours.Args("/kc", "--c=3")
	for _, want := range []string{"--kubeconfig=/kc", "--leader-elect=false", "--secure-port=0", "--log-level=info", "--a=1"} {
		if !slices.Contains(first, want) {
			t.Errorf("ours args %q lack %s", first, want)
		}
	}
	// Per-run flags come last (they win), and one run's never leak into the next.
	if first[len(first)-1] != "--b=2" || second[len(second)-1] != "--c=3" || slices.Contains(second, "--b=2") {
		t.Errorf("ours args: %q then %q", first, second)
	}

	up := UpstreamSide("a-controller,b-controller", "--q=1")
	args, _ := up.Args("/kc", "--z=9")
	want := []string{"--kubeconfig=/kc", "--controllers=a-controller,b-controller", "--leader-elect=false",
		"--use-service-account-credentials=false", "--secure-port=0", "--q=1", "--z=9", "--v=1"}
	if !slices.Equal(args, want) || up.UserAgent != UpstreamUserAgent {
		t.Errorf("upstream args %q, want %q", args, want)
	}
}
