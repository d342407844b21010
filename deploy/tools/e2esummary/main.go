// Command e2esummary prints one line per spec of a Ginkgo JSON report (e2e.test
// --ginkgo.json-report): its state and its full name, then the counts. Hand-written because
// it reads only four fields; importing Ginkgo's types for them would add nothing.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
)

type suite struct {
	SpecReports []struct {
		ContainerHierarchyTexts []string
		LeafNodeText            string
		LeafNodeType            string
		State                   string
	}
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: e2esummary report.json")
		os.Exit(2)
	}
	data, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var suites []suite
	if err := json.Unmarshal(data, &suites); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	counts := map[string]int{}
	var lines []string
	for _, s := range suites {
		for _, r := range s.SpecReports {
			if r.LeafNodeType != "It" || r.State == "skipped" && len(r.ContainerHierarchyTexts) == 0 {
				continue
			}
			counts[r.State]++
			if r.State == "skipped" {
				continue // focus and skip leave out thousands; only run specs are listed
			}
			lines = append(lines, fmt.Sprintf("%-8s %s %s", r.State, strings.Join(r.ContainerHierarchyTexts, " "), r.LeafNodeText))
		}
	}
	sort.Strings(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	fmt.Printf("conformance: %d passed, %d failed\n", counts["passed"], counts["failed"]+counts["panicked"]+counts["timedout"]+counts["aborted"])
}
