package churn

import (
	"context"
	"errors"
	"fmt"
	"log"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// The controllers the churn drives, by the name of the kcm-split service that runs them.
const (
	Endpoints     = "endpoints"
	NodeLifecycle = "nodelifecycle"
	Quota         = "quota"
	Namespace     = "namespace"
	ServiceLB     = "servicelb"
	PVBinder      = "pvbinder"
)

// All are the controllers, in the order loops, reports and tables list them.
var All = []string{Endpoints, NodeLifecycle, Quota, Namespace, ServiceLB, PVBinder}

// LabelKey labels everything the churn creates, with Config.Prefix as its value.
const LabelKey = "kcm-split.io/churn"

// PoolGVR is kcm-split's address pool (the chart's CRD), which the servicelb loop needs.
var PoolGVR = schema.GroupVersionResource{Group: "lb.kcm-split.io", Version: "v1alpha1", Resource: "ipaddresspools"}

// Config says where and what to churn.
type Config struct {
	// Client makes the changes and reads their effects.
	Client kubernetes.Interface
	// Dynamic creates the address pool; needed only with ServiceLB.
	Dynamic dynamic.Interface
	// Prefix begins the name of every namespace, Node, PersistentVolume and pool the churn
	// creates, and is the value of its LabelKey label ("churn" if empty). Two churns on one
	// cluster need two prefixes.
	Prefix string
	// Controllers are the loops to run, among All (all if empty): leave out a controller no
	// one runs (servicelb without a cloud provider or kcm-split).
	Controllers []string
	// NodeGrace is --node-monitor-grace-period of the node lifecycle controllers (every owner's
	// the same; upstream's default 50 s if zero): a fake Node's Lease lasts that long, and a
	// silent Node's change is timed from its last renewal plus NodeGrace.
	NodeGrace time.Duration
	// ExtraNodes are more Nodes the churn creates and plays the kubelet of, besides its own (a
	// control-plane Node for mirror Pods on a cluster without kubelets). Never a real Node.
	ExtraNodes []string
	// NodeZone, if set, labels the fake Nodes with topology.kubernetes.io/zone: the node
	// lifecycle controller then weighs their health apart from real Nodes'.
	NodeZone string
	// KubeletVersion, if set, is the version the fake kubelets report in their Nodes' status
	// (nodeInfo.kubeletVersion), as a real kubelet does: `kubeadm upgrade` refuses a cluster
	// with a Node that reports none.
	KubeletVersion string
	// PoolCIDR is the pool's range (192.0.2.0/24 if empty), reserved to the servicelb loop's
	// namespace.
	PoolCIDR string
	// EffectTimeout bounds the wait for each change's effect (3 min if zero): past it the
	// change is lost work.
	EffectTimeout time.Duration
	// Logf logs each failed step and lost change (log.Printf if nil).
	Logf func(format string, args ...any)
}

// Churn is a set of loops, one per controller, with the objects and fake Nodes they need.
type Churn struct {
	cfg   Config
	loops []*Loop
	// nodes are the fake Nodes, nil if neither endpoints nor nodelifecycle runs.
	nodes *fakeNodes

	mu          sync.Mutex
	stopLoops   context.CancelFunc
	stopRenew   context.CancelFunc
	renewDone   chan struct{}
	report      *Report
	closed      bool
	stoppedLoop bool
}

// New checks cfg and builds the loops; it creates nothing (Setup does).
func New(cfg Config) (*Churn, error) {
	if cfg.Client == nil {
		return nil, errors.New("churn: no client")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "churn"
	}
	if cfg.NodeGrace == 0 {
		cfg.NodeGrace = 50 * time.Second
	}
	if cfg.PoolCIDR == "" {
		cfg.PoolCIDR = "192.0.2.0/24"
	}
	if cfg.EffectTimeout == 0 {
		cfg.EffectTimeout = 3 * time.Minute
	}
	if cfg.Logf == nil {
		cfg.Logf = log.Printf
	}
	if len(cfg.Controllers) == 0 {
		cfg.Controllers = All
	}
	for _, name := range cfg.Controllers {
		if !slices.Contains(All, name) {
			return nil, fmt.Errorf("churn: unknown controller %q (one of %v)", name, All)
		}
	}
	c := &Churn{cfg: cfg}
	if c.runs(ServiceLB) && cfg.Dynamic == nil {
		return nil, errors.New("churn: servicelb needs Config.Dynamic for its address pool")
	}
	if c.runs(Endpoints) || c.runs(NodeLifecycle) {
		labels := c.labels()
		if cfg.NodeZone != "" {
			labels[zoneLabel] = cfg.NodeZone
		}
		p := cfg.Prefix + "-node-"
		c.nodes = &fakeNodes{c: cfg.Client, names: append([]string{p + "0", p + "1", p + "flap"}, cfg.ExtraNodes...), flap: p + "flap",
			grace: cfg.NodeGrace, labels: labels, version: cfg.KubeletVersion, silent: map[string]bool{}, renewed: map[string]time.Time{}}
	}
	build := map[string]func() *Loop{Endpoints: c.endpointsLoop, NodeLifecycle: c.nodeLoop, Quota: c.quotaLoop,
		Namespace: c.namespaceLoop, ServiceLB: c.serviceLBLoop, PVBinder: c.pvLoop}
	for _, name := range All { // All's order, whatever cfg.Controllers'
		if c.runs(name) {
			l := build[name]()
			l.effectTimeout, l.logf = cfg.EffectTimeout, cfg.Logf
			c.loops = append(c.loops, l)
		}
	}
	return c, nil
}

func (c *Churn) runs(name string) bool { return slices.Contains(c.cfg.Controllers, name) }

// ns is the namespace of a controller's loop.
func (c *Churn) ns(controller string) string {
	suffix := map[string]string{Endpoints: "endpoints", Quota: "quota", PVBinder: "pv", ServiceLB: "lb"}[controller]
	return c.cfg.Prefix + "-" + suffix
}

func (c *Churn) labels() map[string]string { return map[string]string{LabelKey: c.cfg.Prefix} }

func (c *Churn) namespace(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: c.labels()}}
}

func (c *Churn) storageClass() string { return c.cfg.Prefix + "-static" }

// Loops are the churn's loops, in All's order.
func (c *Churn) Loops() []*Loop { return c.loops }

// Loop is the loop of a controller, nil if it does not run.
func (c *Churn) Loop(name string) *Loop {
	for _, l := range c.loops {
		if l.name == name {
			return l
		}
	}
	return nil
}

// Pause pauses the loop of a controller (see Loop.Pause); nothing if it does not run.
func (c *Churn) Pause(name string) {
	if l := c.Loop(name); l != nil {
		l.Pause()
	}
}

// Resume resumes the loop of a controller; nothing if it does not run.
func (c *Churn) Resume(name string) {
	if l := c.Loop(name); l != nil {
		l.Resume()
	}
}

// Setup creates what the loops need: their namespaces, the Service and its Pod, the quota, the
// address pool, the fake Nodes and their Leases. It fails on an object already there (a
// previous run's: Cleanup first).
func (c *Churn) Setup(ctx context.Context) error {
	cl := c.cfg.Client
	for _, name := range []string{Endpoints, Quota, PVBinder, ServiceLB} {
		if !c.runs(name) {
			continue
		}
		if _, err := cl.CoreV1().Namespaces().Create(ctx, c.namespace(c.ns(name)), metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	if c.nodes != nil {
		if err := c.nodes.setup(ctx); err != nil {
			return err
		}
	}
	if c.runs(Endpoints) {
		ns := c.ns(Endpoints)
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
		if _, err := cl.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			return err
		}
		// On a fake Node: no kubelet runs it, the test writes its status.
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns, Labels: map[string]string{"app": "web"}},
			Spec: corev1.PodSpec{NodeName: c.nodes.names[0], Containers: []corev1.Container{{Name: "c", Image: "web"}}}}
		out, err := cl.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		out.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: webIP, PodIPs: []corev1.PodIP{{IP: webIP}}, Conditions: readyConditions(true)}
		if _, err := cl.CoreV1().Pods(ns).UpdateStatus(ctx, out, metav1.UpdateOptions{}); err != nil {
			return err
		}
	}
	if c.runs(Quota) {
		ns := c.ns(Quota)
		q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "q", Namespace: ns},
			Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("20")}}}
		if _, err := cl.CoreV1().ResourceQuotas(ns).Create(ctx, q, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	if c.runs(ServiceLB) {
		pool := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": PoolGVR.GroupVersion().String(), "kind": "IPAddressPool",
			"metadata": map[string]any{"name": c.cfg.Prefix + "-pool", "labels": map[string]any{LabelKey: c.cfg.Prefix}},
			"spec":     map[string]any{"addresses": []any{c.cfg.PoolCIDR}, "namespaces": []any{c.ns(ServiceLB)}},
		}}
		if _, err := c.cfg.Dynamic.Resource(PoolGVR).Create(ctx, pool, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// Start starts the fake kubelets' renewals, creates the Pod the quota counts throughout (once
// a quota controller gave the quota its status: admission charges only a quota with one),
// and starts every loop (a paused one waits). The loops end with Stop or Close.
func (c *Churn) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopLoops != nil {
		return errors.New("churn: started twice")
	}
	if c.nodes != nil {
		rctx, stop := context.WithCancel(context.WithoutCancel(ctx))
		c.stopRenew, c.renewDone = stop, make(chan struct{})
		go func() {
			defer close(c.renewDone)
			c.nodes.renew(rctx)
		}()
	}
	if c.runs(Quota) {
		if err := c.createLongLivedQuotaPod(ctx); err != nil {
			return err
		}
	}
	lctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	c.stopLoops = stop
	for _, l := range c.loops {
		l.run(lctx)
	}
	return nil
}

func (c *Churn) createLongLivedQuotaPod(ctx context.Context) error {
	ns := c.ns(Quota)
	err := wait.PollUntilContextTimeout(ctx, PollEvery, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		q, err := c.cfg.Client.CoreV1().ResourceQuotas(ns).Get(ctx, "q", metav1.GetOptions{})
		return err == nil && q.Status.Hard != nil, nil
	})
	if err != nil {
		return fmt.Errorf("the quota never got its status: %w", err)
	}
	_, err = c.cfg.Client.CoreV1().Pods(ns).Create(ctx, c.quotaPod("long"), metav1.CreateOptions{})
	return err
}

// WaitCaughtUp waits, up to timeout, until every loop not paused has had a change made after
// the call answered: every controller acts again. The error names the loops still waiting.
func (c *Churn) WaitCaughtUp(ctx context.Context, timeout time.Duration) error {
	since := time.Now()
	var behind []string
	err := wait.PollUntilContextTimeout(ctx, PollEvery, timeout, true, func(context.Context) (bool, error) {
		behind = behind[:0]
		for _, l := range c.loops {
			if !l.CaughtUp(since) {
				behind = append(behind, l.name)
			}
		}
		return len(behind) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("not caught up within %s: %s: %w", timeout, strings.Join(behind, ", "), err)
	}
	return nil
}

// Report is what the churn measured, per controller.
type Report struct {
	Controllers []ControllerReport
}

// ControllerReport is one loop's figures over the whole run.
type ControllerReport struct {
	Name string
	// Changes is the number of changes made (and awaited).
	Changes int
	// LongestGap is the longest time a change waited for its controller.
	LongestGap time.Duration
	// Lost is the number of changes whose effect never appeared.
	Lost int
	// StepErrors is the number of changes that could not be made (API errors).
	StepErrors int64
	// EndStateOK says whether the controller's end state held every change's effect when the
	// churn stopped; EndState is what was checked (or what was wrong).
	EndStateOK bool
	EndState   string
}

// Lost is the lost work of the run: every change whose effect never appeared, plus one per
// controller whose end state was not reached.
func (r Report) Lost() int {
	n := 0
	for _, cr := range r.Controllers {
		n += cr.Lost
		if !cr.EndStateOK {
			n++
		}
	}
	return n
}

// Thin names the controllers whose churn did not exercise them: fewer than min changes made,
// or more than one change in ten failed at the API. "0 lost" means nothing for those.
func (r Report) Thin(min int) []string {
	var out []string
	for _, cr := range r.Controllers {
		if cr.Changes < min || cr.StepErrors*10 > int64(cr.Changes) {
			out = append(out, fmt.Sprintf("%s (%d changes, %d step errors)", cr.Name, cr.Changes, cr.StepErrors))
		}
	}
	return out
}

// String is one line per controller.
func (r Report) String() string {
	var b strings.Builder
	for _, cr := range r.Controllers {
		fmt.Fprintf(&b, "churn %s: %d changes, longest gap %.2fs, %d lost, %d step errors, end state %s: %v\n",
			cr.Name, cr.Changes, cr.LongestGap.Seconds(), cr.Lost, cr.StepErrors, cr.EndState, cr.EndStateOK)
	}
	return b.String()
}

// Stop stops the loops, one after the other: each one's change in flight is awaited, then its
// end state is checked (up to the effect timeout) while the loops not yet stopped go on. The
// fake kubelets go on renewing until Close. A second call returns the first one's report.
func (c *Churn) Stop(ctx context.Context) Report {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.report != nil {
		return *c.report
	}
	rep := Report{}
	for _, l := range c.loops {
		l.Pause()
		cr := ControllerReport{Name: l.name, Lost: l.Lost(), StepErrors: l.StepErrors()}
		err := wait.PollUntilContextTimeout(ctx, PollEvery, c.cfg.EffectTimeout, true, func(ctx context.Context) (bool, error) {
			ok, what, err := l.final(ctx)
			cr.EndState = what
			return ok && err == nil, nil
		})
		cr.EndStateOK = err == nil
		cr.LongestGap, cr.Changes = l.Gap(Window{End: time.Now()})
		rep.Controllers = append(rep.Controllers, cr)
	}
	c.endLoops()
	c.report = &rep
	return rep
}

// endLoops ends every loop's goroutine (a paused one at once, one in flight after its step).
// c.mu is held.
func (c *Churn) endLoops() {
	if c.stopLoops == nil || c.stoppedLoop {
		return
	}
	c.stoppedLoop = true
	c.stopLoops()
	for _, l := range c.loops {
		<-l.done
	}
}

// Close ends the loops (without the checks of Stop) and the fake kubelets' renewals; the fake
// Nodes then go NotReady. It is safe to call more than once, and after Stop.
func (c *Churn) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.closed = true
	c.endLoops()
	if c.stopRenew != nil {
		c.stopRenew()
		<-c.renewDone
	}
}

// Cleanup closes the churn and deletes everything it created (by its label), then waits until
// it is gone: the namespaces need a namespace controller running, the volumes and claims the
// protection controllers. The churn's Pods are deleted at once first, as no kubelet would
// finish a graceful deletion on a fake Node.
func (c *Churn) Cleanup(ctx context.Context) error {
	c.Close()
	cl := c.cfg.Client
	sel := metav1.ListOptions{LabelSelector: LabelKey + "=" + c.cfg.Prefix}
	now := metav1.DeleteOptions{GracePeriodSeconds: new(int64)}
	var errs []error
	nss, err := cl.CoreV1().Namespaces().List(ctx, sel)
	if err != nil {
		return err
	}
	for _, ns := range nss.Items {
		errs = append(errs, ignoreNotFound(cl.CoreV1().Pods(ns.Name).DeleteCollection(ctx, now, metav1.ListOptions{})))
		errs = append(errs, ignoreNotFound(cl.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{})))
	}
	errs = append(errs, cl.CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, sel))
	errs = append(errs, cl.CoordinationV1().Leases(nodeLeaseNamespace).DeleteCollection(ctx, metav1.DeleteOptions{}, sel))
	errs = append(errs, cl.CoreV1().PersistentVolumes().DeleteCollection(ctx, metav1.DeleteOptions{}, sel))
	if c.cfg.Dynamic != nil && c.runs(ServiceLB) {
		errs = append(errs, ignoreNotFound(c.cfg.Dynamic.Resource(PoolGVR).DeleteCollection(ctx, metav1.DeleteOptions{}, sel)))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	var left []string
	err = wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		left = left[:0]
		if l, err := cl.CoreV1().Namespaces().List(ctx, sel); err == nil {
			for _, o := range l.Items {
				left = append(left, "namespace "+o.Name)
			}
		}
		if l, err := cl.CoreV1().Nodes().List(ctx, sel); err == nil {
			for _, o := range l.Items {
				left = append(left, "Node "+o.Name)
			}
		}
		if l, err := cl.CoreV1().PersistentVolumes().List(ctx, sel); err == nil {
			for _, o := range l.Items {
				left = append(left, "PersistentVolume "+o.Name)
			}
		}
		return len(left) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("churn cleanup: still there: %s: %w", strings.Join(left, ", "), err)
	}
	return nil
}
