package informer

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// LabelIndex is the name of the index SelectingPods adds: one entry per label of each object,
// "<namespace>/<key>=<value>".
const LabelIndex = "kcm-split/label"

func labelIndexKeys(obj any) ([]string, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(m.GetLabels()))
	for k, v := range m.GetLabels() {
		out = append(out, labelIndexKey(m.GetNamespace(), k, v))
	}
	return out, nil
}

func labelIndexKey(ns, k, v string) string { return ns + "/" + k + "=" + v }

// SelectingPods returns a PodLister over inf whose namespaced List finds a selector's Pods
// through LabelIndex instead of reading every Pod of the namespace: a Service's sync then
// costs its own Pods, not the namespace's. Upstream's listers scan the namespace, which at
// 20,000 Pods in one namespace is most of a sync's CPU. The index is added to inf once (it
// must not have started); every caller on the same informer shares it.
//
// Hand-written: client-go indexes by namespace only, and its listers never use another index.
func SelectingPods(inf cache.SharedIndexInformer) (corelisters.PodLister, error) {
	if _, ok := inf.GetIndexer().GetIndexers()[LabelIndex]; !ok {
		if err := inf.AddIndexers(cache.Indexers{LabelIndex: labelIndexKeys}); err != nil {
			return nil, fmt.Errorf("adding the label index: %w", err)
		}
	}
	return &selectingPods{PodLister: corelisters.NewPodLister(inf.GetIndexer()), indexer: inf.GetIndexer()}, nil
}

type selectingPods struct {
	corelisters.PodLister
	indexer cache.Indexer
}

func (l *selectingPods) Pods(ns string) corelisters.PodNamespaceLister {
	return &selectingNamespace{PodNamespaceLister: l.PodLister.Pods(ns), indexer: l.indexer, ns: ns}
}

type selectingNamespace struct {
	corelisters.PodNamespaceLister
	indexer cache.Indexer
	ns      string
}

// List returns the Pods of the namespace sel matches. A selector with an equality
// requirement (every Service selector) reads that label's index entry and filters it by the
// whole selector; any other falls back to a scan.
func (n *selectingNamespace) List(sel labels.Selector) ([]*v1.Pod, error) {
	reqs, selectable := sel.Requirements()
	if !selectable || n.ns == "" {
		return n.PodNamespaceLister.List(sel)
	}
	for _, r := range reqs {
		op := r.Operator()
		if (op != selection.Equals && op != selection.DoubleEquals && op != selection.In) || r.Values().Len() != 1 {
			continue
		}
		objs, err := n.indexer.ByIndex(LabelIndex, labelIndexKey(n.ns, r.Key(), r.Values().UnsortedList()[0]))
		if err != nil {
			return nil, err
		}
		out := make([]*v1.Pod, 0, len(objs))
		for _, o := range objs {
			if p, ok := o.(*v1.Pod); ok && sel.Matches(labels.Set(p.Labels)) {
				out = append(out, p)
			}
		}
		return out, nil
	}
	return n.PodNamespaceLister.List(sel)
}
