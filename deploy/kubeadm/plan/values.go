package plan

import (
	"bytes"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// tree is a YAML mapping built in order, each value with an optional line comment.
type tree struct {
	keys []string
	vals map[string]*leaf
	// asis keeps the keys in the order they were added (the chart's controllers, kubeadm's
	// document); otherwise keyRank orders them.
	asis bool
}

// leaf is a value of a tree: a scalar (string, int64, float64, bool), a list of scalars
// ([]item) or of mappings ([]*tree), or a tree.
type leaf struct {
	value   any
	comment string
}

// item is an entry of a list, with its comment.
type item struct {
	value   string
	comment string
}

func newTree() *tree { return &tree{vals: map[string]*leaf{}} }

// sub returns the mapping under key, made if absent.
func (t *tree) sub(key string) *tree {
	if l, ok := t.vals[key]; ok {
		return l.value.(*tree)
	}
	s := newTree()
	t.set(key, s, "")
	return s
}

// set sets key to v (replacing an earlier value, keeping its place).
func (t *tree) set(key string, v any, comment string) {
	if l, ok := t.vals[key]; ok {
		l.value, l.comment = v, comment
		return
	}
	t.keys = append(t.keys, key)
	t.vals[key] = &leaf{value: v, comment: comment}
}

// add appends v to the list under key.
func (t *tree) add(key, v, comment string) {
	l, ok := t.vals[key]
	if !ok {
		t.set(key, []item(nil), "")
		l = t.vals[key]
	}
	l.value = append(l.value.([]item), item{v, comment})
}

// get returns the value at a dotted path, for tests.
func (t *tree) get(path ...string) (any, bool) {
	l, ok := t.vals[path[0]]
	if !ok {
		return nil, false
	}
	if len(path) == 1 {
		return l.value, true
	}
	s, ok := l.value.(*tree)
	if !ok {
		return nil, false
	}
	return s.get(path[1:]...)
}

// keyRank orders the keys a reader looks for first; others follow alphabetically.
var keyRank = []string{
	"defaults", "controllers", "takeOverFromKCM", // top level
	"enabled", "namespace", "podSelector", "leaseName", "logFormat", "leaderElection", // takeOverFromKCM, defaults
	"leaseDuration", "renewDeadline", "retryPeriod", // defaults.leaderElection
	"kubeAPIQPS", "kubeAPIBurst", "logLevel", "flags", "extraArgs", // a controller
}

// order lists the keys: in the order they were added (asis), or by keyRank, then alphabetically.
func (t *tree) order() []string {
	keys := slices.Clone(t.keys)
	if t.asis {
		return keys
	}
	rank := func(k string) int {
		if i := slices.Index(keyRank, k); i >= 0 {
			return i
		}
		return len(keyRank)
	}
	slices.SortStableFunc(keys, func(a, b string) int {
		if ra, rb := rank(a), rank(b); ra != rb {
			return ra - rb
		}
		return strings.Compare(a, b)
	})
	return keys
}

// node renders the tree as a YAML mapping node.
func (t *tree) node() (*yaml.Node, error) {
	m := &yaml.Node{Kind: yaml.MappingNode}
	for _, k := range t.order() {
		l := t.vals[k]
		key := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k}
		var v *yaml.Node
		var err error
		switch x := l.value.(type) {
		case *tree:
			v, err = x.node()
		case []*tree:
			v = &yaml.Node{Kind: yaml.SequenceNode}
			for _, sub := range x {
				n, e := sub.node()
				if e != nil {
					return nil, e
				}
				v.Content = append(v.Content, n)
			}
		case []item:
			v = &yaml.Node{Kind: yaml.SequenceNode}
			for _, it := range x {
				n, e := scalar(it.value)
				if e != nil {
					return nil, e
				}
				if it.comment != it.value {
					n.LineComment = comment(it.comment)
				}
				v.Content = append(v.Content, n)
			}
		default:
			v, err = scalar(x)
		}
		if err != nil {
			return nil, err
		}
		if l.comment != "" {
			if v.Kind == yaml.ScalarNode {
				v.LineComment = comment(l.comment)
			} else {
				key.HeadComment = comment(l.comment)
			}
		}
		m.Content = append(m.Content, key, v)
	}
	return m, nil
}

func scalar(v any) (*yaml.Node, error) {
	var n yaml.Node
	if err := n.Encode(v); err != nil {
		return nil, err
	}
	return &n, nil
}

func comment(s string) string {
	if s == "" {
		return ""
	}
	return "# " + s
}

// encodeYAML renders a node with the chart's indentation.
func encodeYAML(n *yaml.Node) (string, error) {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(n); err != nil {
		return "", err
	}
	if err := enc.Close(); err != nil {
		return "", err
	}
	return b.String(), nil
}
