package plan

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
)

// kcmName is kube-controller-manager's program and container name.
const kcmName = "kube-controller-manager"

// given is one flag of kube-controller-manager's command line as it reads it.
type given struct {
	// Name is the flag's name without dashes ("_" read as "-", as kube-controller-manager does).
	Name string
	// Value is the value in force: the last one given, or for a list (kList, kGates) every
	// value given, joined by commas.
	Value string
	// Written is the flag as written, each time it is given ("--a=1", "--a 1").
	Written []string
	// Flag is the table's entry; Known is false for a flag kube-controller-manager v1.36 does not have.
	Flag  kcmFlag
	Known bool
}

// String is the flag as it reads: --name=value (a flag it does not know, as written).
func (g given) String() string {
	if !g.Known {
		return g.Written[len(g.Written)-1]
	}
	if g.Flag.Kind == kBool && g.Value == "true" {
		return "--" + g.Name
	}
	return "--" + g.Name + "=" + g.Value
}

// source is what the plan read: kube-controller-manager's flags and where its Pods are.
type source struct {
	// What names it for messages: the manifest's path, or the Pods.
	What  string
	Flags []given
	// Namespace and Selector find kube-controller-manager's Pods, for the take-over.
	Namespace string
	Selector  string
}

// lookup returns the flag of that name, if given.
func (s source) lookup(name string) (given, bool) {
	for _, g := range s.Flags {
		if g.Name == name {
			return g, true
		}
	}
	return given{}, false
}

// inputError is bad input: the plan exits with ExitUsage.
type inputError struct{ err error }

func (e inputError) Error() string { return e.err.Error() }
func (e inputError) Unwrap() error { return e.err }

func badInput(format string, a ...any) error { return inputError{fmt.Errorf(format, a...)} }

// readManifest reads a static Pod manifest (kubeadm's /etc/kubernetes/manifests/kube-controller-manager.yaml).
func readManifest(path string) (source, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return source{}, badInput("--manifest: %v", err)
	}
	var pod corev1.Pod
	if err := yaml.Unmarshal(b, &pod); err != nil {
		return source{}, badInput("%s: not a Pod manifest: %v", path, err)
	}
	if pod.Kind != "Pod" || pod.APIVersion != "v1" {
		return source{}, badInput("%s: not a Pod manifest (apiVersion %q, kind %q; want v1 Pod)", path, pod.APIVersion, pod.Kind)
	}
	flags, err := podFlags(&pod)
	if err != nil {
		return source{}, badInput("%s: %v", path, err)
	}
	s := source{What: path, Flags: flags, Namespace: pod.Namespace, Selector: "component=" + kcmName}
	if s.Namespace == "" {
		s.Namespace = metav1.NamespaceSystem // where the kubelet publishes a static Pod without one
	}
	if c, ok := pod.Labels["component"]; ok && c != "" {
		s.Selector = "component=" + c
	}
	return s, nil
}

// readPods reads kube-controller-manager's Pods in namespace matching selector: every replica
// must run the same flags, or the plan could not be right for all of them.
func readPods(ctx context.Context, client kubernetes.Interface, namespace, selector string) (source, error) {
	list, err := client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return source{}, fmt.Errorf("listing kube-controller-manager's Pods (%s in %s): %w", selector, namespace, err)
	}
	if len(list.Items) == 0 {
		return source{}, badInput("no Pod in namespace %s matches %q: is kube-controller-manager a static Pod there (--namespace, --selector)?", namespace, selector)
	}
	pods := list.Items
	slices.SortFunc(pods, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	var names []string
	perPod := make([][]given, len(pods))
	for i := range pods {
		names = append(names, pods[i].Name)
		if perPod[i], err = podFlags(&pods[i]); err != nil {
			return source{}, badInput("Pod %s/%s: %v", namespace, pods[i].Name, err)
		}
	}
	if diff := disagreement(pods, perPod); diff != "" {
		return source{}, badInput("kube-controller-manager's replicas run different flags, so no one plan fits them all; make their manifests agree first:\n%s", diff)
	}
	return source{What: fmt.Sprintf("Pods %s in %s", strings.Join(names, ", "), namespace), Flags: perPod[0], Namespace: namespace, Selector: selector}, nil
}

// disagreement describes the flags whose values differ between Pods (absent counting as a
// value), or "" when every Pod runs the same.
func disagreement(pods []corev1.Pod, perPod [][]given) string {
	values := make([]map[string]string, len(pods))
	names := map[string]bool{}
	for i, flags := range perPod {
		values[i] = map[string]string{}
		for _, g := range flags {
			values[i][g.Name] = g.Value
			names[g.Name] = true
		}
	}
	var out []string
	for _, name := range slices.Sorted(maps.Keys(names)) {
		var per []string
		first, same := "", true
		for i := range pods {
			v, ok := values[i][name]
			if !ok {
				v = "(not given)"
			}
			if i == 0 {
				first = v
			} else if v != first {
				same = false
			}
			per = append(per, pods[i].Name+": "+v)
		}
		if !same {
			out = append(out, fmt.Sprintf("  --%s: %s", name, strings.Join(per, "; ")))
		}
	}
	return strings.Join(out, "\n")
}

// podFlags reads the flags of the Pod's kube-controller-manager container: the container of that
// name, else the only one; its command (kube-controller-manager and its flags) and args.
func podFlags(pod *corev1.Pod) ([]given, error) {
	var c *corev1.Container
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == kcmName {
			c = &pod.Spec.Containers[i]
		}
	}
	if c == nil && len(pod.Spec.Containers) == 1 {
		c = &pod.Spec.Containers[0]
	}
	if c == nil {
		return nil, fmt.Errorf("no container named %s", kcmName)
	}
	argv := append(slices.Clone(c.Command), c.Args...)
	if len(c.Command) > 0 {
		if prog := filepath.Base(c.Command[0]); prog != kcmName {
			return nil, fmt.Errorf("the container runs %q, not %s: a wrapper (a shell, a script) cannot be read; give kube-controller-manager's own command line", c.Command[0], kcmName)
		}
		argv = argv[1:]
	}
	for _, a := range argv {
		if strings.Contains(a, "$(") {
			return nil, fmt.Errorf("argument %q is expanded by the kubelet from the environment, which the plan cannot see", a)
		}
	}
	return parseFlags(argv)
}

// parseFlags reads kube-controller-manager's arguments (without the program) as it does: "--name=value",
// "--name value", "--name" alone for a boolean, "-v" as "--v", "_" in a name read as "-"; a
// repeated flag's last value wins, except for lists, whose values add up. A value kube-controller-manager
// would refuse is refused.
func parseFlags(argv []string) ([]given, error) {
	var out []given
	index := map[string]int{}
	for i := 0; i < len(argv); i++ {
		a := argv[i]
		var name string
		switch {
		case strings.HasPrefix(a, "--") && len(a) > 2:
			name = a[2:]
		case strings.HasPrefix(a, "-v") && (len(a) == 2 || a[2] == '='), strings.HasPrefix(a, "-h") && len(a) == 2:
			name = a[1:] // the two shorthands: -v, -h
		default:
			return nil, fmt.Errorf("argument %q is not a flag kube-controller-manager reads (it takes no positional arguments, and its flags start with --)", a)
		}
		name, value, hasValue := strings.Cut(name, "=")
		name = strings.ReplaceAll(name, "_", "-")
		if name == "h" {
			name = "help"
		}
		f, known := lookupFlag(name)
		written := a
		if !hasValue {
			switch {
			case known && f.Kind == kBool:
				value = "true"
			case i+1 < len(argv) && (known || !strings.HasPrefix(argv[i+1], "-")):
				if !known {
					return nil, fmt.Errorf("--%s is not a flag of kube-controller-manager v1.36, so whether %q is its value cannot be told; write --%s=value", name, argv[i+1], name)
				}
				i++
				value = argv[i]
				written += " " + value
			case known:
				return nil, fmt.Errorf("--%s needs a value", name)
			}
		}
		if known {
			v, err := checkValue(f, value)
			if err != nil {
				return nil, fmt.Errorf("%s: %v (kube-controller-manager refuses it too)", written, err)
			}
			value = v
		}
		if j, seen := index[name]; seen {
			g := &out[j]
			g.Written = append(g.Written, written)
			if known && (f.Kind == kList || f.Kind == kGates) && g.Value != "" && value != "" {
				g.Value += "," + value
			} else if !known || (f.Kind != kList && f.Kind != kGates) || value != "" {
				g.Value = value
			}
			continue
		}
		index[name] = len(out)
		out = append(out, given{Name: name, Value: value, Written: []string{written}, Flag: f, Known: known})
	}
	return out, nil
}

// checkValue checks a value by the flag's kind and returns it as the plan uses it.
func checkValue(f kcmFlag, v string) (string, error) {
	switch f.Kind {
	case kBool:
		b, err := strconv.ParseBool(v)
		if err != nil {
			return "", fmt.Errorf("not a boolean")
		}
		return strconv.FormatBool(b), nil
	case kInt:
		n, err := strconv.ParseInt(v, 0, 32)
		if err != nil {
			return "", fmt.Errorf("not a 32-bit integer")
		}
		return strconv.FormatInt(n, 10), nil
	case kFloat:
		if _, err := strconv.ParseFloat(v, 32); err != nil {
			return "", fmt.Errorf("not a number")
		}
	case kDuration:
		if _, err := time.ParseDuration(v); err != nil {
			return "", fmt.Errorf("not a duration (such as 40s, 5m)")
		}
	case kGates:
		for pair := range strings.SplitSeq(v, ",") {
			if strings.TrimSpace(pair) == "" {
				continue
			}
			k, b, ok := strings.Cut(pair, "=")
			if _, err := strconv.ParseBool(strings.TrimSpace(b)); !ok || strings.TrimSpace(k) == "" || err != nil {
				return "", fmt.Errorf("%q is not Gate=true|false", pair)
			}
		}
	}
	return v, nil
}
