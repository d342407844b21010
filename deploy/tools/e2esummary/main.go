// Command e2esummary reads Ginkgo JSON reports (e2e.test --ginkgo.json-report, ginkgo
// --json-report). By default: one line per spec of one report, its state and its full name,
// then the counts. With -sig: the specs of every report given counted per SIG (run, passed,
// failed, skipped at run time), printed as a markdown table, then the failed specs with the
// first line of their failure and the specs skipped at run time with their reason (a spec that
// needs two nodes skips itself on one). Hand-written because it reads only a few fields;
// importing Ginkgo's types for them would add nothing.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
)

type specReport struct {
	ContainerHierarchyTexts []string
	LeafNodeText            string
	LeafNodeType            string
	State                   string
	RunTime                 int64 // nanoseconds
	Failure                 struct {
		Message string
	}
}

type suite struct {
	SpecReports []specReport
}

func main() {
	sig := flag.Bool("sig", false, "count per SIG over every report given; a markdown table")
	flag.Parse()
	if flag.NArg() == 0 || !*sig && flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: e2esummary report.json | e2esummary -sig report.json...")
		os.Exit(2)
	}
	var specs []specReport
	for _, f := range flag.Args() {
		s, err := readReport(f)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		specs = append(specs, s...)
	}
	if *sig {
		writeBySIG(os.Stdout, specs)
		return
	}
	counts := map[string]int{}
	var lines []string
	for _, r := range specs {
		if filtered(r) {
			continue
		}
		counts[r.State]++
		if r.State == "skipped" {
			continue // focus and skip leave out thousands; only run specs are listed
		}
		lines = append(lines, fmt.Sprintf("%-8s %s", r.State, name(r)))
	}
	sort.Strings(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	fmt.Printf("conformance: %d passed, %d failed\n", counts["passed"], failedCount(counts))
}

// readReport is every spec report of the suites in the JSON report at path.
func readReport(path string) ([]specReport, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var suites []suite
	if err := json.Unmarshal(data, &suites); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out []specReport
	for _, s := range suites {
		out = append(out, s.SpecReports...)
	}
	return out, nil
}

// filtered tells the reports that are not a spec that was selected: setup nodes, and specs
// left out by focus, skip or labels (skipped, without a failure message; Ginkgo reports those
// with their hierarchy too, or without one).
func filtered(r specReport) bool {
	if r.LeafNodeType != "It" {
		return true
	}
	return r.State == "skipped" && (len(r.ContainerHierarchyTexts) == 0 || r.Failure.Message == "")
}

func name(r specReport) string {
	return strings.TrimSpace(strings.Join(r.ContainerHierarchyTexts, " ") + " " + r.LeafNodeText)
}

func failedCount(c map[string]int) int {
	return c["failed"] + c["panicked"] + c["timedout"] + c["aborted"] + c["interrupted"]
}

var sigRE = regexp.MustCompile(`\[sig-[a-z0-9-]+\]`)

// sigOf is the first [sig-...] tag of the spec's name, or "(none)".
func sigOf(r specReport) string {
	if m := sigRE.FindString(name(r)); m != "" {
		return strings.Trim(m, "[]")
	}
	return "(none)"
}

// firstLine is the first non-empty line of s, cut at 200 characters.
func firstLine(s string) string {
	for l := range strings.SplitSeq(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			if len(l) > 200 {
				l = l[:200] + "..."
			}
			return l
		}
	}
	return ""
}

// writeBySIG writes the per-SIG table (run = passed + failed; skipped at run time apart), the
// totals, then the failed and the skipped specs by name.
func writeBySIG(w io.Writer, specs []specReport) {
	type row struct{ passed, failed, skipped int }
	rows := map[string]*row{}
	var failed, skipped []string
	for _, r := range specs {
		if filtered(r) {
			continue
		}
		s := sigOf(r)
		if rows[s] == nil {
			rows[s] = &row{}
		}
		switch {
		case r.State == "passed":
			rows[s].passed++
		case r.State == "skipped":
			rows[s].skipped++
			skipped = append(skipped, fmt.Sprintf("- %s: %s", name(r), firstLine(r.Failure.Message)))
		default:
			rows[s].failed++
			failed = append(failed, fmt.Sprintf("- %s (%s, %.0fs): %s", name(r), r.State, float64(r.RunTime)/1e9, firstLine(r.Failure.Message)))
		}
	}
	sigs := make([]string, 0, len(rows))
	for s := range rows {
		sigs = append(sigs, s)
	}
	sort.Strings(sigs)
	fmt.Fprintln(w, "| SIG | run | passed | failed | skipped at run time |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: |")
	var total row
	for _, s := range sigs {
		r := rows[s]
		fmt.Fprintf(w, "| %s | %d | %d | %d | %d |\n", s, r.passed+r.failed, r.passed, r.failed, r.skipped)
		total.passed += r.passed
		total.failed += r.failed
		total.skipped += r.skipped
	}
	fmt.Fprintf(w, "| **total** | **%d** | **%d** | **%d** | **%d** |\n", total.passed+total.failed, total.passed, total.failed, total.skipped)
	sort.Strings(failed)
	sort.Strings(skipped)
	if len(failed) > 0 {
		fmt.Fprintf(w, "\nFailed (%d):\n\n%s\n", len(failed), strings.Join(failed, "\n"))
	}
	if len(skipped) > 0 {
		fmt.Fprintf(w, "\nSkipped at run time (%d):\n\n%s\n", len(skipped), strings.Join(skipped, "\n"))
	}
}
