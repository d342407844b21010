package app

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kcm-split/kcm-split/shared/app/takeover"
	"github.com/kcm-split/kcm-split/shared/health"
	"github.com/kcm-split/kcm-split/shared/informer"
	"github.com/kcm-split/kcm-split/shared/leader"
)

// takeOverOptions are --take-over-from-kcm and the --kcm-* flags it reads.
type takeOverOptions struct {
	enabled   bool
	kcm       takeover.Options
	hostNodes cli.StringSlice // --kcm-lease-host-nodes, into kcm.LeaseHostNodes
}

func (o *takeOverOptions) flags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{
			Name:        FlagTakeOver,
			Category:    "Leader election",
			Destination: &o.enabled,
			Usage: "stand by (Ready) until kube-controller-manager provably runs none of this binary's controllers: " +
				"every Pod matching --" +
				FlagKCMPodSelector +
				" turns them off in its --controllers, and its Lease is free, expired, or taken by a process started " +
				"in one of those Pods; stop them, writes refused at once, when that no longer holds. Needs --" +
				FlagLeaderElect +
				"; not with --" +
				FlagEnableMigration,
		},
		&cli.StringFlag{
			Name:        FlagKCMNamespace,
			Category:    "Leader election",
			Value:       "kube-system",
			Destination: &o.kcm.Namespace,
			Usage:       "namespace of kube-controller-manager's Pods and Lease, for --" + FlagTakeOver,
		},
		&cli.StringFlag{
			Name:        FlagKCMPodSelector,
			Category:    "Leader election",
			Value:       "component=kube-controller-manager",
			Destination: &o.kcm.PodSelector,
			Usage:       "label selector of kube-controller-manager's Pods (kubeadm's static Pods' label), for --" + FlagTakeOver,
		},
		&cli.StringFlag{
			Name:        FlagKCMLeaseName,
			Category:    "Leader election",
			Value:       "kube-controller-manager",
			Destination: &o.kcm.LeaseName,
			Usage:       "name of kube-controller-manager's Lease (its --leader-elect-resource-name), for --" + FlagTakeOver,
		},
		&cli.StringSliceFlag{
			Name:        takeover.FlagLeaseHostNodes,
			Category:    "Leader election",
			Destination: &o.hostNodes,
			Usage: "host=node pairs, for --" + FlagTakeOver + ": the Node of each host named in kube-controller-manager's Lease " +
				"holder identity, where the Node has another name (the kubelet's --hostname-override, kubeadm's nodeRegistration.name). " +
				"A holder on a host that is no node of kube-controller-manager's Pods is never proof",
		},
	}
}

// complete checks that the take-over can work: election on, not with migration, and a
// selector that picks kube-controller-manager's Pods, not every Pod.
func (o *takeOverOptions) complete(election leader.Config, mig migrationOptions) error {
	if !o.enabled {
		return nil
	}
	switch {
	case !election.Enabled:
		// The proof gates writes through the fence, which exists only with election.
		return &FlagError{Flag: FlagTakeOver, Err: fmt.Errorf("needs --%s", FlagLeaderElect)}
	case mig.enabled:
		return &FlagError{Flag: FlagTakeOver, Err: fmt.Errorf("and --%s are two ways of switching from kube-controller-manager: choose one", FlagEnableMigration)}
	case o.kcm.Namespace == "" || o.kcm.LeaseName == "":
		return &FlagError{Flag: FlagTakeOver, Err: fmt.Errorf("needs --%s and --%s", FlagKCMNamespace, FlagKCMLeaseName)}
	}
	nodes, err := parseHostNodes(o.hostNodes.Value())
	if err != nil {
		return &FlagError{Flag: takeover.FlagLeaseHostNodes, Err: err}
	}
	o.kcm.LeaseHostNodes = nodes
	sel, err := labels.Parse(o.kcm.PodSelector)
	if err != nil {
		return &FlagError{Flag: FlagKCMPodSelector, Err: err}
	}
	if sel.Empty() {
		// Every Pod of the namespace would have to prove the controllers off.
		return &FlagError{Flag: FlagKCMPodSelector, Err: errors.New("empty: it would select every Pod of the namespace")}
	}
	return nil
}

// parseHostNodes reads host=node pairs (hosts in lower case, as Node names are).
func parseHostNodes(pairs []string) (map[string]string, error) {
	out := map[string]string{}
	for _, p := range pairs {
		host, node, ok := strings.Cut(p, "=")
		host, node = strings.ToLower(strings.TrimSpace(host)), strings.TrimSpace(node)
		if !ok || host == "" || node == "" {
			return nil, fmt.Errorf("%q is not host=node", p)
		}
		if prev, dup := out[host]; dup && prev != node {
			return nil, fmt.Errorf("host %q mapped to both %q and %q", host, prev, node)
		}
		out[host] = node
	}
	return out, nil
}

// startTakeOver, with --take-over-from-kcm, starts reading kube-controller-manager's Pods and
// Lease: writes also need the proof, and /readyz names the take-over's state.
func (p *process) startTakeOver(ctx context.Context, o *options) error {
	if !o.takeOver.enabled {
		return nil
	}
	g, err := takeover.New(p.client, o.takeOver.kcm, o.leader.RetryPeriod, p.reg)
	if err != nil {
		return err
	}
	p.rt.takeOver = g
	g.Start(ctx)
	p.elector.FenceAlso(leader.ReasonKCMMayRun, g.AllowWrite)
	p.checks.AddNamed(g.CheckName, alwaysOK, health.Readyz)
	return nil
}

// runTakeOver runs controllers once kube-controller-manager provably runs none of them, and
// stops them (their writes refused at once) when that stops being provable.
func (rt *Runtime) runTakeOver(ctx context.Context, controllers []Controller, factories []informer.Factory) error {
	rt.SetSynced(func() bool { return true }) // waiting for the proof is not a reason to be unready
	return rt.takeOver.Run(ctx, controllerNames(controllers), func(ctx context.Context) error {
		return rt.runControllers(ctx, controllers, factories)
	})
}
