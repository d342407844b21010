package plan

import (
	"bytes"
	"io"
	"os"

	"go.yaml.in/yaml/v3"
)

// readClusterConfig reads a file ("-": stdin) holding kubeadm's ClusterConfiguration, as
// `kubectl -n kube-system get cm kubeadm-config -o jsonpath='{.data.ClusterConfiguration}'`
// prints it.
func readClusterConfig(path string, stdin io.Reader) ([]byte, error) {
	if path == "-" {
		b, err := io.ReadAll(stdin)
		if err != nil {
			return nil, badInput("--cluster-config -: %v", err)
		}
		return b, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, badInput("--cluster-config: %v", err)
	}
	return b, nil
}

// withControllers returns kubeadm's ClusterConfiguration (v1beta4) doc with
// controllerManager.extraArgs' entry named controllers set to value (added if there is none),
// every other key, entry and comment kept in its place: the file to upload to the kubeadm-config
// ConfigMap and to render the static Pod from.
func withControllers(doc []byte, value string) ([]byte, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(doc, &root); err != nil {
		return nil, badInput("--cluster-config: %v", err)
	}
	if root.Kind != yaml.DocumentNode || len(root.Content) != 1 || root.Content[0].Kind != yaml.MappingNode {
		return nil, badInput("--cluster-config: not one YAML mapping")
	}
	top := root.Content[0]
	if kind := scalarOf(top, "kind"); kind != "ClusterConfiguration" {
		return nil, badInput("--cluster-config: kind %q, want ClusterConfiguration", kind)
	}
	// v1beta3's extraArgs is a map and kubeadm v1.36 writes v1beta4: only that is edited.
	if v := scalarOf(top, "apiVersion"); v != "kubeadm.k8s.io/v1beta4" {
		return nil, badInput("--cluster-config: apiVersion %q, want kubeadm.k8s.io/v1beta4 (`kubeadm config migrate` converts older ones)", v)
	}
	cm, err := child(top, "controllerManager", yaml.MappingNode)
	if err != nil {
		return nil, err
	}
	args, err := child(cm, "extraArgs", yaml.SequenceNode)
	if err != nil {
		return nil, err
	}
	set := false
	for _, e := range args.Content {
		if e.Kind == yaml.MappingNode && scalarOf(e, "name") == "controllers" {
			if v := valueOf(e, "value"); v != nil {
				v.Kind, v.Tag, v.Value, v.Style = yaml.ScalarNode, "!!str", value, yaml.DoubleQuotedStyle
			} else {
				e.Content = append(e.Content, str("value"), quoted(value))
			}
			set = true
		}
	}
	if !set {
		args.Content = append(args.Content, &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{
			str("name"), str("controllers"), str("value"), quoted(value)}})
	}
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(&root); err != nil {
		return nil, err
	}
	return out.Bytes(), enc.Close()
}

func str(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }

func quoted(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s, Style: yaml.DoubleQuotedStyle}
}

// valueOf is the value node of key in mapping m, or nil.
func valueOf(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

func scalarOf(m *yaml.Node, key string) string {
	if v := valueOf(m, key); v != nil && v.Kind == yaml.ScalarNode {
		return v.Value
	}
	return ""
}

// child is the value of key in m, made (empty, of kind) when absent or null ({} is kept as a
// mapping and filled).
func child(m *yaml.Node, key string, kind yaml.Kind) (*yaml.Node, error) {
	v := valueOf(m, key)
	if v == nil {
		v = &yaml.Node{Kind: kind}
		m.Content = append(m.Content, str(key), v)
		return v, nil
	}
	if v.Kind == yaml.ScalarNode && (v.Tag == "!!null" || v.Value == "") {
		v.Kind, v.Tag, v.Value = kind, "", ""
	}
	if v.Kind != kind {
		return nil, badInput("--cluster-config: %s is not a %s", key, map[yaml.Kind]string{yaml.MappingNode: "mapping", yaml.SequenceNode: "list"}[kind])
	}
	v.Style = 0 // a flow-style {} or [] becomes a block when it gets content
	return v, nil
}

// errNoClusterConfig: -o cluster-config without the file to edit.
var errNoClusterConfig = badInput("-o cluster-config needs --cluster-config FILE (the ClusterConfiguration of the kubeadm-config ConfigMap)")
