package kubeadm

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
)

// markerRE is the comment that names the command block after it.
var markerRE = regexp.MustCompile(`^<!-- kubeadm-e2e: ([a-z0-9-]+) -->$`)

// Runbook is the kubeadm runbook's command blocks, by the ID of their marker.
type Runbook struct {
	Blocks map[string]string
	// Order is the IDs in the order of the text.
	Order []string
}

// ParseRunbook reads every block marked `<!-- kubeadm-e2e: ID -->` in markdown: the marker's
// next line must open a ```sh fence, whose content up to the closing fence is the block. A
// marker without its fence, an unclosed fence or an ID given twice is an error.
func ParseRunbook(markdown []byte) (*Runbook, error) {
	rb := &Runbook{Blocks: map[string]string{}}
	sc := bufio.NewScanner(bytes.NewReader(markdown))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	line := 0
	next := func() (string, bool) {
		if !sc.Scan() {
			return "", false
		}
		line++
		return sc.Text(), true
	}
	for {
		l, ok := next()
		if !ok {
			break
		}
		m := markerRE.FindStringSubmatch(strings.TrimSpace(l))
		if m == nil {
			continue
		}
		id, at := m[1], line
		if _, dup := rb.Blocks[id]; dup {
			return nil, fmt.Errorf("line %d: block %q marked twice", at, id)
		}
		if fence, ok := next(); !ok || strings.TrimSpace(fence) != "```sh" {
			return nil, fmt.Errorf("line %d: marker %q is not followed by a ```sh fence", at, id)
		}
		var body strings.Builder
		closed := false
		for {
			l, ok := next()
			if !ok {
				break
			}
			if strings.TrimSpace(l) == "```" {
				closed = true
				break
			}
			body.WriteString(l)
			body.WriteByte('\n')
		}
		if !closed {
			return nil, fmt.Errorf("line %d: block %q has no closing fence", at, id)
		}
		rb.Blocks[id] = body.String()
		rb.Order = append(rb.Order, id)
	}
	return rb, sc.Err()
}

// ReadRunbook parses the runbook of the README at path.
func ReadRunbook(path string) (*Runbook, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	rb, err := ParseRunbook(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return rb, nil
}

// exportRE finds the variables a settings block exports.
var exportRE = regexp.MustCompile(`(?:^|\s)([A-Z_][A-Z0-9_]*)=`)

// Exported lists the variables block id sets on its `export` lines, in order.
func (rb *Runbook) Exported(id string) []string {
	var out []string
	for l := range strings.SplitSeq(rb.Blocks[id], "\n") {
		l = strings.TrimSpace(l)
		if !strings.HasPrefix(l, "export ") {
			continue
		}
		if i := strings.Index(l, "#"); i >= 0 {
			l = l[:i]
		}
		for _, m := range exportRE.FindAllStringSubmatch(l, -1) {
			out = append(out, m[1])
		}
	}
	return out
}

// Script is block id preceded by the blocks of prelude (the helpers), as one bash script that
// stops at the first failing command: what an operator pastes into a shell that has the
// settings and the helpers.
func (rb *Runbook) Script(id string, prelude ...string) (string, error) {
	var b strings.Builder
	b.WriteString("set -euo pipefail\n")
	for _, p := range append(prelude, id) {
		body, ok := rb.Blocks[p]
		if !ok {
			return "", fmt.Errorf("the runbook has no block %q", p)
		}
		b.WriteString(body)
	}
	return b.String(), nil
}

// Run runs block id (after prelude) with bash in dir, env added to the process's environment;
// it returns the combined output, and an error naming the block when bash fails.
func (rb *Runbook) Run(ctx context.Context, dir string, env []string, id string, prelude ...string) (string, error) {
	script, err := rb.Script(id, prelude...)
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("runbook block %q: %w", id, err)
	}
	return string(out), nil
}
