// Package chart checks the Helm chart charts/kcm-split against the real thing: its RBAC
// in a real kube-apiserver with each controller binary running under exactly that role, its
// dashboards against the metrics each binary really exports, its values schema against each
// binary's flags. The helpers here render the chart and read its files; the tests are in
// the _test.go files.
package chart

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

// Chart is the chart directory with the helm binary that renders it.
type Chart struct {
	Dir  string
	Helm string
}

// FindChart locates charts/kcm-split and bin/helm from the repository root (the directory
// holding go.work) above the working directory; binDir overrides bin/.
func FindChart(binDir string) (*Chart, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	if binDir == "" {
		binDir = filepath.Join(root, "bin")
	}
	helm := filepath.Join(binDir, "helm")
	if _, err := os.Stat(helm); err != nil {
		return nil, fmt.Errorf("%s not found: run `make tools` first (it builds helm into bin/)", helm)
	}
	return &Chart{Dir: filepath.Join(root, "charts", "kcm-split"), Helm: helm}, nil
}

// RepoRoot is the directory holding go.work above the working directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.work above the working directory")
		}
		dir = parent
	}
}

// Template runs `helm template release chart -n namespace args...` and returns the output;
// on failure the error carries helm's message.
func (c *Chart) Template(release, namespace string, args ...string) ([]byte, error) {
	all := append([]string{"template", release, c.Dir, "--namespace", namespace}, args...)
	cmd := exec.Command(c.Helm, all...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("helm %s: %v: %s", strings.Join(all, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// Object is one rendered manifest.
type Object struct {
	Kind, Name, Namespace string
	// Raw is the manifest as generic YAML.
	Raw map[string]any
	// Typed is the manifest decoded with client-go's scheme; nil for kinds it does not know
	// (ServiceMonitor).
	Typed runtime.Object
}

// Decode splits rendered manifests into objects.
func Decode(manifests []byte) ([]Object, error) {
	var out []Object
	for _, doc := range strings.Split("\n"+string(manifests), "\n---") {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		var o Object
		if err := yaml.Unmarshal([]byte(doc), &o.Raw); err != nil {
			return nil, fmt.Errorf("decoding %q: %w", firstLine(doc), err)
		}
		o.Kind, _ = o.Raw["kind"].(string)
		if md, ok := o.Raw["metadata"].(map[string]any); ok {
			o.Name, _ = md["name"].(string)
			o.Namespace, _ = md["namespace"].(string)
		}
		if typed, _, err := scheme.Codecs.UniversalDeserializer().Decode([]byte(doc), nil, nil); err == nil {
			o.Typed = typed
		}
		out = append(out, o)
	}
	return out, nil
}

// stripComments drops comment-only lines, so a document holding only helm's "# Source:"
// header counts as empty.
func stripComments(doc string) string {
	var out []string
	for _, l := range strings.Split(doc, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "#") {
			continue
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

func firstLine(doc string) string {
	s := strings.TrimSpace(stripComments(doc))
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

// Values is the chart's values.yaml.
type Values struct {
	Controllers map[string]ControllerValues `json:"controllers"`
}

// ControllerValues is what the tests read of a controllers.<alias> entry.
type ControllerValues struct {
	Enabled   bool   `json:"enabled"`
	Binary    string `json:"binary"`
	Port      int    `json:"port"`
	ShardHash string `json:"shardHash"`
}

// LoadValues reads the chart's values.yaml.
func (c *Chart) LoadValues() (*Values, error) {
	b, err := os.ReadFile(filepath.Join(c.Dir, "values.yaml"))
	if err != nil {
		return nil, err
	}
	var v Values
	if err := yaml.Unmarshal(b, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// Aliases returns the chart's controller aliases, sorted.
func (v *Values) Aliases() []string {
	out := make([]string, 0, len(v.Controllers))
	for a := range v.Controllers {
		out = append(out, a)
	}
	sort.Strings(out)
	return out
}

// Only returns --set arguments enabling alias and disabling every other controller.
func (v *Values) Only(alias string) []string {
	var out []string
	for _, a := range v.Aliases() {
		out = append(out, "--set", fmt.Sprintf("controllers.%s.enabled=%t", a, a == alias))
	}
	return out
}
