package takeover

import (
	"fmt"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/kcm-split/kcm-split/shared/app/internal/cmdline"
)

// kcmAliases are kube-controller-manager's older names (--controllers accepts both) of the
// controllers kcm-split replaces, as cmd/kube-controller-manager/app declares them in v1.36.
// Hand-written: that table lives in k8s.io/kubernetes, which no binary may import.
func kcmAliases() map[string][]string {
	return map[string][]string{
		"endpoints-controller":               {"endpoint"},
		"endpointslice-controller":           {"endpointslice"},
		"endpointslice-mirroring-controller": {"endpointslicemirroring"},
		"node-lifecycle-controller":          {"nodelifecycle"},
		"node-ipam-controller":               {"nodeipam"},
		"taint-eviction-controller":          nil,
		"resourcequota-controller":           {"resourcequota"},
		"namespace-controller":               {"namespace"},
		"persistentvolume-binder-controller": {"persistentvolume-binder"},
		"service-lb-controller":              {"service"},
	}
}

// kcmView is what the take-over proof reads: kube-controller-manager's Pods and its Lease.
type kcmView struct {
	synced bool
	pods   []*corev1.Pod
	lease  *coordinationv1.Lease // nil when absent
	// leaseSince is the local time the Lease was first seen as it is now (its resourceVersion):
	// it expires, by this process's observation, a lease duration after that.
	leaseSince time.Time
	// hostNodes maps a host named in a Lease identity (lower case) to its Node's name, where
	// the two differ (--kcm-lease-host-nodes).
	hostNodes map[string]string
}

// goneAfter is how long kube-controller-manager's Lease must stay released or expired, with no
// Pod of it in sight, before it counts as gone: a static Pod's mirror Pod is deleted and created
// again when its manifest changes (seconds, more on a slow kubelet), and whatever comes back
// then may take a released Lease at once.
const goneAfter = 5 * time.Minute

// verdict is what proveKCMOff found.
type verdict int

const (
	unproven verdict = iota // kube-controller-manager may run a controller, or it cannot be told
	proven                  // it runs none of them
	// undecided: the Lease's holder is on a host whose Pod proves the controllers off, but it
	// has not renewed since a second after that Pod's process started, so it is not yet told
	// apart from the process the Pod replaced (the first second of a new leader). A waiting
	// binary keeps waiting; a running one keeps running: it took over on an earlier proof
	// (the Lease released, expired, or held by this host's new process), after which the
	// replaced process, gone before its successor started, cannot hold the Lease.
	undecided
)

// proveKCMOff reports whether kube-controller-manager provably runs none of controllers, and
// why (not): every Pod of kube-controller-manager turns each of them off in its --controllers,
// and its Lease is absent, released or expired by local observation (with a Pod in sight, or
// for goneAfter without one), or held by a process of one of those Pods. The holder's identity
// names its host, whose Node has the same name or the one --kcm-lease-host-nodes maps it to;
// the holder is the Pod's process, and not the one the Pod replaced, once it renewed the Lease
// after that Pod's container started: the kubelet runs one instance of a static Pod at a
// time, so the replaced process was gone by then.
// Anything it cannot read (a shell wrapper, $(VAR) in the arguments, no start time) is not proof.
func proveKCMOff(controllers []string, v kcmView, now time.Time) (verdict, string) {
	if !v.synced {
		return unproven, "kube-controller-manager's Pods and Lease are not read yet"
	}
	aliases := kcmAliases()
	for _, p := range v.pods {
		entries, why := kcmControllersOf(p)
		if why != "" {
			return unproven, fmt.Sprintf("Pod %s/%s: %s", p.Namespace, p.Name, why)
		}
		for _, c := range controllers {
			if kcmRuns(c, aliases[c], entries) {
				return unproven, fmt.Sprintf("Pod %s/%s runs %s (--controllers=%s)", p.Namespace, p.Name, c, strings.Join(entries, ","))
			}
		}
	}
	l := v.lease
	if l == nil {
		return proven, "no kube-controller-manager Lease"
	}
	holder := ""
	if l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	free := ""
	if holder == "" {
		free = "kube-controller-manager's Lease is released"
	} else if d := l.Spec.LeaseDurationSeconds; d != nil && now.Sub(v.leaseSince) > time.Duration(*d)*time.Second {
		free = fmt.Sprintf("kube-controller-manager's Lease, held by %q, expired", holder)
	}
	if free != "" {
		if len(v.pods) > 0 {
			return proven, free
		}
		// No Pod to read: a static Pod being created again, or one this process cannot see.
		if now.Sub(v.leaseSince) < goneAfter {
			return unproven, free + ", and no Pod of kube-controller-manager is in sight: it may be coming back"
		}
		return proven, fmt.Sprintf("%s for %s, and no Pod of kube-controller-manager is in sight", free, goneAfter)
	}
	host, _, ok := strings.Cut(holder, "_")
	if !ok || host == "" {
		return unproven, fmt.Sprintf("kube-controller-manager's Lease holder %q names no host", holder)
	}
	if l.Spec.RenewTime == nil {
		return unproven, fmt.Sprintf("kube-controller-manager's Lease, held by %q, has no renew time", holder)
	}
	node := host
	if n, ok := v.hostNodes[strings.ToLower(host)]; ok {
		node = n
	}
	onHost := false
	for _, p := range v.pods {
		if !strings.EqualFold(p.Spec.NodeName, node) { // a Node name is the host name in lower case
			continue
		}
		onHost = true
		started := kcmStartedAt(p)
		if started.IsZero() {
			continue
		}
		// Start times have whole seconds: only a renewal a second after the truncated start is
		// surely later than the start itself. (The host's one clock wrote both.)
		if l.Spec.RenewTime.Time.After(started.Add(time.Second)) {
			return proven, fmt.Sprintf("kube-controller-manager's Lease is held by %q, which runs in Pod %s/%s", holder, p.Namespace, p.Name)
		}
		if !l.Spec.RenewTime.Time.Before(started) {
			return undecided, fmt.Sprintf("kube-controller-manager's Lease is held by %q, renewed within the second Pod %s/%s's process started", holder, p.Namespace, p.Name)
		}
	}
	if !onHost {
		// A process on a host this process cannot place: not proof, however the times look (a
		// kube-controller-manager outside --kcm-pod-selector's sight may run every controller).
		return unproven, fmt.Sprintf("kube-controller-manager's Lease is held by %q, on host %q, which is no node of its Pods "+
			"(if that host's Node has another name, map it: --%s=%s=<node>)", holder, host, FlagLeaseHostNodes, strings.ToLower(host))
	}
	// No time in the reason: it is logged when it changes, and the Lease renews every few seconds.
	return unproven, fmt.Sprintf("kube-controller-manager's Lease is held by %q, and no Pod on node %q runs a process started before its last renewal", holder, node)
}

// kcmRunsAny is what kcm_split_takeover_kcm_runs_controllers shows: 1 when a Pod of
// kube-controller-manager runs one of controllers by its --controllers, 0 when every Pod is read
// and none does, -1 when that cannot be told (not read yet, or a Pod it cannot read runs none of
// those it can). Unlike the proof it ignores the Lease: it says what KCM is configured to run,
// which is what an operator must change, not whether this binary may run.
func kcmRunsAny(controllers []string, v kcmView) float64 {
	if !v.synced {
		return -1
	}
	aliases := kcmAliases()
	unreadable := false
	for _, p := range v.pods {
		entries, why := kcmControllersOf(p)
		if why != "" {
			unreadable = true
			continue
		}
		for _, c := range controllers {
			if kcmRuns(c, aliases[c], entries) {
				return 1
			}
		}
	}
	if unreadable {
		return -1
	}
	return 0
}

// kcmContainer is the Pod's kube-controller-manager container: the one of that name, else the
// only one.
func kcmContainer(p *corev1.Pod) *corev1.Container {
	for i := range p.Spec.Containers {
		if p.Spec.Containers[i].Name == "kube-controller-manager" {
			return &p.Spec.Containers[i]
		}
	}
	if len(p.Spec.Containers) == 1 {
		return &p.Spec.Containers[0]
	}
	return nil
}

// kcmControllersOf returns the entries of the Pod's --controllers (kube-controller-manager's
// default "*" when absent; repeated flags add up, as a string slice flag does), or why they
// cannot be known.
func kcmControllersOf(p *corev1.Pod) ([]string, string) {
	c := kcmContainer(p)
	if c == nil {
		return nil, "no container named kube-controller-manager"
	}
	args := append(slices.Clone(c.Command), c.Args...)
	var entries []string
	given := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		if strings.Contains(a, "$(") {
			return nil, fmt.Sprintf("argument %q is expanded by the kubelet", a)
		}
		var value string
		switch {
		case strings.HasPrefix(a, "--controllers="):
			value = strings.TrimPrefix(a, "--controllers=")
		case a == "--controllers" && i+1 < len(args):
			i++
			value = args[i]
		default:
			continue
		}
		given = true
		for e := range strings.SplitSeq(value, ",") {
			if e = strings.TrimSpace(e); e != "" {
				entries = append(entries, e)
			}
		}
	}
	if !given {
		entries = []string{"*"}
	}
	return entries, ""
}

// kcmRuns applies kube-controller-manager's reading of --controllers to one controller.
func kcmRuns(name string, aliases []string, entries []string) bool {
	canonical := map[string]string{name: name}
	for _, a := range aliases {
		canonical[a] = name
	}
	return cmdline.Enabled(name, false, entries, canonical)
}

// kcmStartedAt is when the Pod's kube-controller-manager container last started running, zero
// when it does not run.
func kcmStartedAt(p *corev1.Pod) time.Time {
	c := kcmContainer(p)
	if c == nil {
		return time.Time{}
	}
	for _, s := range p.Status.ContainerStatuses {
		if s.Name == c.Name && s.State.Running != nil {
			return s.State.Running.StartedAt.Time
		}
	}
	return time.Time{}
}
