package benchkit

import (
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"
)

// stderr receives progress lines; a variable so tests can capture them.
var stderr io.Writer = os.Stderr

// Percentile returns the nearest-rank p-th percentile of d (p in 0..100; 100 is the maximum),
// or 0 for no samples. d is not modified.
func Percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// Millis is d in milliseconds, for metrics and table rows.
func Millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// MiB is n bytes in MiB, for metrics and table rows.
func MiB(n int64) float64 { return float64(n) / (1 << 20) }

// MS formats d as milliseconds with one decimal, e.g. "3.2ms", for progress lines and cells.
func MS(d time.Duration) string { return fmt.Sprintf("%.1fms", Millis(d)) }

// MiBString formats n bytes as MiB with one decimal, e.g. "56.3MiB".
func MiBString(n int64) string { return fmt.Sprintf("%.1fMiB", MiB(n)) }

// NotMeasured is the value of a row a side did not measure (a scenario it skipped): its cell
// and ratio print "n/a".
var NotMeasured = math.NaN()

// Row is one metric of an ours-versus-upstream table: its name, how to read it from a result
// (NotMeasured when absent) and the printf verb of its value, e.g. "%.1f".
type Row[R any] struct {
	Name   string
	Value  func(*R) float64
	Format string
}

// Rows is a table's rows in order.
type Rows[R any] []Row[R]

// Add appends the row name, read by value and printed with format.
func (rs *Rows[R]) Add(name string, value func(*R) float64, format string) {
	*rs = append(*rs, Row[R]{Name: name, Value: value, Format: format})
}

// AddPercentiles appends one row per percentile in ps of the samples sel picks, in
// milliseconds printed with format: "<name> p50 (ms)", ..., and "<name> max (ms)" for 100.
func (rs *Rows[R]) AddPercentiles(name string, sel func(*R) []time.Duration, format string, ps ...float64) {
	for _, p := range ps {
		label := fmt.Sprintf("%s p%g (ms)", name, p)
		if p == 100 {
			label = name + " max (ms)"
		}
		rs.Add(label, PercentileMS(sel, p), format)
	}
}

// AddSeconds appends the row name: the duration get reads, in seconds printed with format.
func (rs *Rows[R]) AddSeconds(name string, get func(*R) time.Duration, format string) {
	rs.Add(name, func(r *R) float64 { return get(r).Seconds() }, format)
}

// AddMiB appends the row name: the byte count get reads, in MiB with one decimal.
func (rs *Rows[R]) AddMiB(name string, get func(*R) int64) {
	rs.Add(name, func(r *R) float64 { return MiB(get(r)) }, "%.1f")
}

// AddCount appends the row name: the count get reads, as a whole number.
func (rs *Rows[R]) AddCount(name string, get func(*R) int) {
	rs.Add(name, func(r *R) float64 { return float64(get(r)) }, "%.0f")
}

// Compare builds the table metric | ours | upstream | ours/upstream from rows. A nil result
// (that side was skipped, or failed) shows "n/a" in its column and in the ratio column.
func Compare[R any](oursName, upstreamName string, ours, upstream *R, rows Rows[R]) Table {
	value := func(r *R, row Row[R]) float64 {
		if r == nil {
			return NotMeasured
		}
		return row.Value(r)
	}
	t := Table{Headings: []string{oursName, upstreamName, "ours/upstream"}}
	for _, row := range rows {
		o, u := value(ours, row), value(upstream, row)
		t.Rows = append(t.Rows, []string{row.Name, Cell(row.Format, o), Cell(row.Format, u), Ratio(o, u)})
	}
	return t
}

// Cell formats v with format, or "n/a" when v is NotMeasured.
func Cell(format string, v float64) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	return fmt.Sprintf(format, v)
}

// Ratio formats ours/upstream with two decimals: "=" when both are 0, "inf" when only
// upstream's is, "n/a" when either was not measured.
func Ratio(ours, upstream float64) string {
	switch {
	case math.IsNaN(ours) || math.IsNaN(upstream):
		return "n/a"
	case upstream != 0:
		return fmt.Sprintf("%.2f", ours/upstream)
	case ours == 0:
		return "="
	default:
		return "inf"
	}
}

// minColumn is the narrowest value column, so short headings still leave room for numbers.
const minColumn = 14

// Table is a plain text table: a left-aligned metric column, then right-aligned value
// columns, one per heading.
type Table struct {
	Headings []string
	// Rows hold the metric's name, then one cell per heading.
	Rows [][]string
}

// Write prints t: a heading line, a line of dashes, then the rows.
func (t Table) Write(w io.Writer) {
	widths := make([]int, len(t.Headings)+1)
	widths[0] = len("metric")
	for i, h := range t.Headings {
		widths[i+1] = max(minColumn, len(h)+1)
	}
	for _, row := range t.Rows {
		for i, cell := range row {
			if i < len(widths) {
				widths[i] = max(widths[i], len(cell))
			}
		}
	}
	line := func(cells []string) {
		var sb strings.Builder
		for i, w := range widths {
			cell := ""
			if i < len(cells) {
				cell = cells[i]
			}
			if i == 0 {
				fmt.Fprintf(&sb, "%-*s", w, cell)
			} else {
				fmt.Fprintf(&sb, "  %*s", w, cell)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(sb.String(), " "))
	}
	line(append([]string{"metric"}, t.Headings...))
	dashes := make([]string, len(widths))
	for i, w := range widths {
		dashes[i] = strings.Repeat("-", w)
	}
	line(dashes)
	for _, row := range t.Rows {
		line(row)
	}
}

// PercentileMS is a Row.Value: the p-th percentile, in milliseconds, of the samples sel picks.
func PercentileMS[R any](sel func(*R) []time.Duration, p float64) func(*R) float64 {
	return func(r *R) float64 { return Millis(Percentile(sel(r), p)) }
}

// AddRow appends the row name with one cell per heading.
func (t *Table) AddRow(name string, cells ...string) {
	t.Rows = append(t.Rows, append([]string{name}, cells...))
}

// Cells formats one row across results (one column each, in order): cell of each result,
// "n/a" for a nil one (that side was skipped, or failed).
func Cells[R any](results []*R, cell func(*R) string) []string {
	out := make([]string, len(results))
	for i, r := range results {
		out[i] = "n/a"
		if r != nil {
			out[i] = cell(r)
		}
	}
	return out
}

// Line is one row of a Lines table: its name and its cell for one result, which the row
// formats itself (units and layouts differ from row to row).
type Line[R any] struct {
	Name string
	Cell func(*R) string
}

// Lines builds the table metric | a column per result, headed by headings in the order of
// results, for the benchmarks that run several variants of one binary: unlike Compare there
// is no upstream, so no ratio column. A nil result shows "n/a" (Cells).
func Lines[R any](headings []string, results []*R, lines ...Line[R]) Table {
	t := Table{Headings: headings}
	for _, l := range lines {
		t.AddRow(l.Name, Cells(results, l.Cell)...)
	}
	return t
}
