package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A report as ginkgo --json-report writes it: a setup node, a spec left out by the focus,
// specs passed, failed and skipped at run time in two SIGs.
const report = `[{"SpecReports": [
 {"LeafNodeType": "SynchronizedBeforeSuite", "State": "passed"},
 {"ContainerHierarchyTexts": ["[sig-apps] Job"], "LeafNodeText": "should run a job [Conformance]", "LeafNodeType": "It", "State": "skipped"},
 {"ContainerHierarchyTexts": ["[sig-network] Services"], "LeafNodeText": "should serve a basic endpoint [Conformance]", "LeafNodeType": "It", "State": "passed", "RunTime": 3000000000},
 {"ContainerHierarchyTexts": ["[sig-network] Services"], "LeafNodeText": "should be able to change the type [Conformance]", "LeafNodeType": "It", "State": "failed", "RunTime": 120000000000,
  "Failure": {"Message": "\nservice is not reachable within 2m0s timeout\nmore"}},
 {"ContainerHierarchyTexts": ["[sig-network] Services"], "LeafNodeText": "should spread [Conformance]", "LeafNodeType": "It", "State": "skipped",
  "Failure": {"Message": "Requires at least 2 nodes (not 1)"}},
 {"ContainerHierarchyTexts": ["[sig-api-machinery] ResourceQuota"], "LeafNodeText": "should create a ResourceQuota [Conformance]", "LeafNodeType": "It", "State": "passed"}
]}]`

func TestWriteBySIG(t *testing.T) {
	p := filepath.Join(t.TempDir(), "report.json")
	if err := os.WriteFile(p, []byte(report), 0o644); err != nil {
		t.Fatal(err)
	}
	specs, err := readReport(p)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	writeBySIG(&b, specs)
	got := b.String()
	for _, want := range []string{
		"| sig-api-machinery | 1 | 1 | 0 | 0 |\n",
		"| sig-network | 2 | 1 | 1 | 1 |\n",
		"| **total** | **3** | **2** | **1** | **1** |\n",
		"- [sig-network] Services should be able to change the type [Conformance] (failed, 120s): service is not reachable within 2m0s timeout\n",
		"- [sig-network] Services should spread [Conformance]: Requires at least 2 nodes (not 1)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	if strings.Contains(got, "sig-apps") {
		t.Errorf("a spec left out by the focus is counted:\n%s", got)
	}
}
