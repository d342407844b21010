package app

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	coordinationinformers "k8s.io/client-go/informers/coordination/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kcm-split/kcm-split/shared/informer"
)

// errProofLapsed ends a term whose controllers stopped because kube-controller-manager may run
// them again (--take-over-from-kcm); the next term waits for the proof again.
var errProofLapsed = errors.New("no longer proven that kube-controller-manager runs none of the controllers")

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

// TakeOverOptions say where kube-controller-manager's replicas and Lease are
// (--take-over-from-kcm and the --kcm-* flags).
type TakeOverOptions struct {
	Namespace   string
	PodSelector string
	LeaseName   string
}

// kcmView is what the take-over proof reads: kube-controller-manager's Pods and its Lease.
type kcmView struct {
	synced bool
	pods   []*corev1.Pod
	lease  *coordinationv1.Lease // nil when absent
	// leaseSince is the local time the Lease was first seen as it is now (its resourceVersion):
	// it expires, by this process's observation, a lease duration after that.
	leaseSince time.Time
}

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
// and its Lease is absent, released, expired by local observation, or held by a process of one
// of those Pods. The holder's identity names its host; it is the Pod's process, and not the one
// the Pod replaced, once it renewed the Lease after that Pod's container started: the kubelet
// runs one instance of a static Pod at a time, so the replaced process was gone by then.
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
	if holder == "" {
		return proven, "kube-controller-manager's Lease is released"
	}
	if d := l.Spec.LeaseDurationSeconds; d != nil && now.Sub(v.leaseSince) > time.Duration(*d)*time.Second {
		return proven, fmt.Sprintf("kube-controller-manager's Lease, held by %q, expired", holder)
	}
	host, _, ok := strings.Cut(holder, "_")
	if !ok || host == "" {
		return unproven, fmt.Sprintf("kube-controller-manager's Lease holder %q names no host", holder)
	}
	if l.Spec.RenewTime == nil {
		return unproven, fmt.Sprintf("kube-controller-manager's Lease, held by %q, has no renew time", holder)
	}
	for _, p := range v.pods {
		if !strings.EqualFold(p.Spec.NodeName, host) { // a Node name is the host name in lower case
			continue
		}
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
	return unproven, fmt.Sprintf("kube-controller-manager's Lease is held by %q, last renewed at %s, and no Pod on node %q runs a process started before that", holder,
		l.Spec.RenewTime.UTC().Format(time.RFC3339Nano), host)
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
	return controllerEnabled(ControllerName{Name: name, Aliases: aliases}, entries, canonical)
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

// kcmWatch keeps kube-controller-manager's Pods and Lease in two small caches, for the
// process's lifetime, and says when either changed.
type kcmWatch struct {
	opts    TakeOverOptions
	pods    cache.SharedIndexInformer
	leases  cache.SharedIndexInformer
	changed chan struct{}

	mu         sync.Mutex
	leaseRV    string
	leaseSince time.Time
}

func newKCMWatch(client kubernetes.Interface, opts TakeOverOptions) (*kcmWatch, error) {
	sel, err := labels.Parse(opts.PodSelector)
	if err != nil {
		return nil, err
	}
	w := &kcmWatch{opts: opts, changed: make(chan struct{}, 1)}
	w.pods = coreinformers.NewFilteredPodInformer(client, opts.Namespace, 0, cache.Indexers{},
		func(o *metav1.ListOptions) { o.LabelSelector = sel.String() })
	// Only what the proof reads is kept.
	if err := w.pods.SetTransform(func(obj any) (any, error) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return obj, nil
		}
		slim := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, UID: p.UID, ResourceVersion: p.ResourceVersion},
			Spec: corev1.PodSpec{NodeName: p.Spec.NodeName}}
		for _, c := range p.Spec.Containers {
			slim.Spec.Containers = append(slim.Spec.Containers, corev1.Container{Name: c.Name, Command: c.Command, Args: c.Args})
		}
		for _, s := range p.Status.ContainerStatuses {
			slim.Status.ContainerStatuses = append(slim.Status.ContainerStatuses, corev1.ContainerStatus{Name: s.Name, State: corev1.ContainerState{Running: s.State.Running}})
		}
		return slim, nil
	}); err != nil {
		return nil, err
	}
	w.leases = coordinationinformers.NewFilteredLeaseInformer(client, opts.Namespace, 0, cache.Indexers{},
		func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", opts.LeaseName).String()
		})
	notify := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { w.notify() },
		UpdateFunc: func(any, any) { w.notify() },
		DeleteFunc: func(any) { w.notify() },
	}
	leaseSeen := func(obj any) {
		if l, ok := obj.(*coordinationv1.Lease); ok {
			w.mu.Lock()
			if l.ResourceVersion != w.leaseRV {
				w.leaseRV, w.leaseSince = l.ResourceVersion, time.Now()
			}
			w.mu.Unlock()
		}
		w.notify()
	}
	if _, err := w.pods.AddEventHandler(notify); err != nil {
		return nil, err
	}
	if _, err := w.leases.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    leaseSeen,
		UpdateFunc: func(_, obj any) { leaseSeen(obj) },
		DeleteFunc: func(any) { w.notify() },
	}); err != nil {
		return nil, err
	}
	return w, nil
}

func (w *kcmWatch) notify() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

func (w *kcmWatch) run(ctx context.Context) {
	go w.pods.RunWithContext(ctx)
	go w.leases.RunWithContext(ctx)
}

func (w *kcmWatch) view() kcmView {
	v := kcmView{synced: w.pods.HasSynced() && w.leases.HasSynced()}
	for _, o := range w.pods.GetStore().List() {
		v.pods = append(v.pods, o.(*corev1.Pod))
	}
	slices.SortFunc(v.pods, func(a, b *corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	if o, ok, _ := w.leases.GetStore().GetByKey(w.opts.Namespace + "/" + w.opts.LeaseName); ok {
		v.lease = o.(*coordinationv1.Lease)
		w.mu.Lock()
		v.leaseSince = w.leaseSince
		if v.lease.ResourceVersion != w.leaseRV {
			v.leaseSince = time.Now() // not through the handler yet: seen now
		}
		w.mu.Unlock()
	}
	return v
}

// takeOverRun is a process's --take-over-from-kcm state: nil in Runtime when it is off.
type takeOverRun struct {
	watch   *kcmWatch
	recheck time.Duration // how often the proof is evaluated again without a change (expiry)
	retry   time.Duration
	allowed atomic.Bool
	proven  prometheus.Gauge
	state   atomic.Pointer[string]
}

func newTakeOver(client kubernetes.Interface, opts TakeOverOptions, retry time.Duration, reg prometheus.Registerer) (*takeOverRun, error) {
	w, err := newKCMWatch(client, opts)
	if err != nil {
		return nil, err
	}
	t := &takeOverRun{watch: w, recheck: time.Second, retry: retry, proven: prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "kcm_split_takeover_proven",
		Help: "1 while --take-over-from-kcm has proof that kube-controller-manager runs none of this binary's controllers (they run), 0 while this binary waits for it.",
	})}
	reg.MustRegister(t.proven)
	t.setState("waiting")
	return t, nil
}

func (t *takeOverRun) setState(s string) { t.state.Store(&s) }

// checkName names the always-passing /readyz check after the state: waiting or active.
func (t *takeOverRun) checkName() string { return "kcmTakeOver-" + *t.state.Load() }

// allowWrite is the fence's further condition: writes leave only while the proof holds.
func (t *takeOverRun) allowWrite() bool { return t.allowed.Load() }

// wait blocks until the proof holds (nil) or ctx ends.
func (t *takeOverRun) wait(ctx context.Context, names []string) error {
	logger := klog.FromContext(ctx)
	last := ""
	for {
		v, why := proveKCMOff(names, t.watch.view(), time.Now())
		if v == proven {
			logger.Info("Take-over: kube-controller-manager runs none of the controllers; starting them", "controllers", names, "proof", why)
			return nil
		}
		if why != last {
			logger.Info("Take-over: waiting for proof that kube-controller-manager runs none of the controllers", "controllers", names, "reason", why)
			last = why
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.watch.changed:
		case <-time.After(t.recheck):
		}
	}
}

// runTakeOver runs controllers once kube-controller-manager provably runs none of them, and
// stops them (their writes refused at once) when that stops being provable.
func (rt *Runtime) runTakeOver(ctx context.Context, controllers []Controller, factories []informer.Factory) error {
	t := rt.takeOver
	logger := klog.FromContext(ctx)
	names := controllerNames(controllers)
	rt.SetSynced(func() bool { return true }) // waiting for the proof is not a reason to be unready
	if err := t.wait(ctx, names); err != nil {
		return nil
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	t.allowed.Store(true)
	t.proven.Set(1)
	t.setState("active")
	lapsed := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-runCtx.Done():
				return
			case <-t.watch.changed:
			case <-time.After(t.recheck):
			}
			if v, why := proveKCMOff(names, t.watch.view(), time.Now()); v == unproven {
				t.allowed.Store(false) // first: nothing leaves from now on
				logger.Info("Take-over: kube-controller-manager may run the controllers again; stopping them", "controllers", names, "reason", why)
				close(lapsed)
				cancel()
				return
			}
		}
	}()
	err := rt.runControllers(runCtx, controllers, factories)
	t.allowed.Store(false)
	cancel()
	<-watched
	t.proven.Set(0)
	t.setState("waiting")
	select {
	case <-lapsed:
		if ctx.Err() == nil {
			return errProofLapsed
		}
	default:
	}
	return err
}
