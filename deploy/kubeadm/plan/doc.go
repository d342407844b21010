// Package plan is kcm-split-plan: it reads a running kube-controller-manager's command line (its
// kubeadm static Pod manifest, or its Pods through the API) and prints what moving some of its
// controllers to kcm-split's binaries takes: the chart values that carry its flags over to those
// binaries, the --controllers value that turns the same controllers off in kube-controller-manager,
// and that value as a kubeadm ClusterConfiguration entry (kubeadm re-renders the manifest from it on
// `kubeadm upgrade`, so an edit of the manifest alone does not last).
//
// Every flag of the command line is accounted for: carried into the values, carried implicitly,
// or named as not carried with the reason. The tables of flags (kcmflags.go) and of binaries
// (binaries.go) are data; their tests check them against the binaries' own flags, the chart and
// kube-controller-manager's --help, so they cannot drift.
package plan
