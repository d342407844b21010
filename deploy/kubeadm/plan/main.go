package plan

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// Exit codes.
const (
	ExitOK      = 0
	ExitFailure = 1 // the apiserver could not be read
	ExitUsage   = 2 // bad flags, or a command line the plan cannot read
)

// Outputs of -o.
const (
	outAll         = "all"
	outValues      = "values"
	outControllers = "controllers"
	outKubeadm     = "kubeadm"
	outCluster     = "cluster-config"
)

const usage = `kcm-split-plan reads a running kube-controller-manager and prints what moving some of its
controllers to kcm-split's binaries takes: the chart values that carry its flags over, and the
--controllers value that turns the same controllers off in it (as a kubeadm ClusterConfiguration
entry, which 'kubeadm upgrade' keeps). Every flag not carried is named, with the reason, on stderr
and in the values' comments.

Usage:
  kcm-split-plan --manifest /etc/kubernetes/manifests/kube-controller-manager.yaml --controllers all
  kcm-split-plan --kubeconfig ~/.kube/config --controllers endpoints,nodelifecycle -o values > values.yaml

Flags:
`

// Main runs kcm-split-plan with args (without the program name) and returns its exit code.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kcm-split-plan", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	manifest := fs.String("manifest", "", "kube-controller-manager's static Pod manifest (kubeadm: /etc/kubernetes/manifests/kube-controller-manager.yaml)")
	kubeconfig := fs.String("kubeconfig", "", "read kube-controller-manager's Pods through the apiserver of this kubeconfig instead; every replica must run the same flags")
	namespace := fs.String("namespace", "kube-system", "namespace of kube-controller-manager's Pods (with --kubeconfig)")
	selector := fs.String("selector", "component="+kcmName, "label selector of kube-controller-manager's Pods (with --kubeconfig; kubeadm's label)")
	var opts Options
	fs.StringVar(&opts.Controllers, "controllers", "", "the kcm-split binaries that take over, comma-separated: "+
		"endpoints, namespace, nodelifecycle, pvbinder, quota, servicelb, or all (every one but servicelb)")
	clusterConfig := fs.String("cluster-config", "", "with -o cluster-config: kubeadm's ClusterConfiguration (v1beta4) to print with the new --controllers set in it, "+
		"every other setting kept (- reads stdin): kubectl -n kube-system get cm kubeadm-config -o jsonpath='{.data.ClusterConfiguration}'")
	fs.BoolVar(&opts.TakeOver, "take-over", true, "add takeOverFromKCM to the values: each binary waits until kube-controller-manager's Pods turn its controllers off")
	fs.BoolVar(&opts.DespiteLeaderMigration, flagDespiteLeaderMigration, false, "plan even though kube-controller-manager runs with "+
		"--enable-leader-migration (refused otherwise: the binaries and the take-over do not take part in a Leader Migration)")
	fs.BoolVar(&opts.DespiteLeaseNamespace, flagDespiteLeaseNamespace, false, "plan a take-over even though kube-controller-manager's "+
		"--leader-elect-resource-namespace is not its Pods' namespace (refused otherwise: the take-over then finds no Lease and goes by the Pods' --controllers alone)")
	output := outAll
	for _, name := range []string{"o", "output"} {
		fs.StringVar(&output, name, outAll, "what to print on stdout: values (the chart values), controllers (kube-controller-manager's "+
			"new --controllers value), kubeadm (the ClusterConfiguration entry), cluster-config (--cluster-config's file with that entry merged), or all (values, then kubeadm, as two YAML documents)")
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return ExitUsage
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "kcm-split-plan: %v\n", err)
		var ie inputError
		if errors.As(err, &ie) {
			return ExitUsage
		}
		return ExitFailure
	}
	switch {
	case fs.NArg() > 0:
		return fail(badInput("unexpected arguments %q", fs.Args()))
	case (*manifest == "") == (*kubeconfig == ""):
		return fail(badInput("give one of --manifest and --kubeconfig"))
	case output != outAll && output != outValues && output != outControllers && output != outKubeadm && output != outCluster:
		return fail(badInput("-o %q: want all, values, controllers, kubeadm or cluster-config", output))
	case output == outCluster && *clusterConfig == "":
		return fail(errNoClusterConfig)
	}
	var src source
	var err error
	if *manifest != "" {
		src, err = readManifest(*manifest)
	} else {
		src, err = readLive(ctx, *kubeconfig, *namespace, *selector)
	}
	if err != nil {
		return fail(err)
	}
	p, err := makePlan(src, opts)
	if err != nil {
		return fail(err)
	}
	var out string
	if output == outCluster {
		doc, err := readClusterConfig(*clusterConfig, stdin)
		if err != nil {
			return fail(err)
		}
		b, err := withControllers(doc, p.New.String())
		if err != nil {
			return fail(err)
		}
		out = string(b)
	} else if out, err = p.output(output); err != nil {
		return fail(err)
	}
	p.Report(stderr)
	fmt.Fprint(stdout, out)
	return ExitOK
}

// readLive reads kube-controller-manager's Pods through the kubeconfig's apiserver.
func readLive(ctx context.Context, kubeconfig, namespace, selector string) (source, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return source{}, badInput("--kubeconfig: %v", err)
	}
	cfg.UserAgent = "kcm-split-plan"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return source{}, badInput("--kubeconfig: %v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return readPods(ctx, client, namespace, selector)
}

// output renders what -o asks for.
func (p *Plan) output(what string) (string, error) {
	switch what {
	case outControllers:
		return p.New.String() + "\n", nil
	case outKubeadm:
		return p.KubeadmYAML()
	case outValues:
		return p.ValuesYAML()
	}
	v, err := p.ValuesYAML()
	if err != nil {
		return "", err
	}
	k, err := p.KubeadmYAML()
	if err != nil {
		return "", err
	}
	return v + "---\n" + k, nil
}
