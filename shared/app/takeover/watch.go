package takeover

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	coordinationinformers "k8s.io/client-go/informers/coordination/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// kcmWatch keeps kube-controller-manager's Pods and Lease in two small caches, for the
// process's lifetime, and says when either changed.
type kcmWatch struct {
	opts    Options
	pods    cache.SharedIndexInformer
	leases  cache.SharedIndexInformer
	changed chan struct{}

	mu         sync.Mutex
	leaseRV    string
	leaseSince time.Time
}

func newKCMWatch(client kubernetes.Interface, opts Options) (*kcmWatch, error) {
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
	v := kcmView{synced: w.pods.HasSynced() && w.leases.HasSynced(), hostNodes: w.opts.LeaseHostNodes}
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
