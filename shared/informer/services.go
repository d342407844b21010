package informer

import (
	"fmt"
	"sort"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// SelectorIndex is the name of the index SelectingServices adds: each Service with a selector
// under exactly one "<namespace>/<key>=<value>" of it (the least key), an empty selector under
// "<namespace>/".
const SelectorIndex = "kcm-split/selector"

// ServiceSelectors answers which Services select a Pod's labels.
type ServiceSelectors interface {
	// Selecting returns the Services of namespace whose non-nil selector matches podLabels
	// (an empty selector matches every Pod; a nil one none).
	Selecting(namespace string, podLabels map[string]string) ([]*v1.Service, error)
}

func selectorIndexKeys(obj any) ([]string, error) {
	svc, ok := obj.(*v1.Service)
	if !ok || svc.Spec.Selector == nil {
		return nil, nil
	}
	if len(svc.Spec.Selector) == 0 {
		return []string{svc.Namespace + "/"}, nil
	}
	keys := make([]string, 0, len(svc.Spec.Selector))
	for k := range svc.Spec.Selector {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return []string{labelIndexKey(svc.Namespace, keys[0], svc.Spec.Selector[keys[0]])}, nil
}

// SelectingServices returns the Services selecting a Pod through SelectorIndex: a Service
// matches a Pod only if the Pod carries its indexed pair, so reading the entries of the Pod's
// own labels finds every match, each once (a Pod has one value per key). Upstream lists and
// matches every Service of the namespace for each Pod event, which at 1,000 Services and
// 20,000 Pods is most of a cold start's allocations. The index is added to inf once (it must
// not have started); every caller on the same informer shares it. Should adding it fail, the
// answer comes from a scan of the namespace instead.
//
// Hand-written: client-go indexes by namespace only and has no reverse-selector index.
func SelectingServices(inf cache.SharedIndexInformer) ServiceSelectors {
	if _, ok := inf.GetIndexer().GetIndexers()[SelectorIndex]; !ok {
		if err := inf.AddIndexers(cache.Indexers{SelectorIndex: selectorIndexKeys}); err != nil {
			return scanningServices{corelisters.NewServiceLister(inf.GetIndexer())}
		}
	}
	return indexedServices{inf.GetIndexer()}
}

type indexedServices struct{ indexer cache.Indexer }

func (s indexedServices) Selecting(namespace string, podLabels map[string]string) ([]*v1.Service, error) {
	var out []*v1.Service
	add := func(key string) error {
		objs, err := s.indexer.ByIndex(SelectorIndex, key)
		if err != nil {
			return err
		}
		for _, o := range objs {
			if svc, ok := o.(*v1.Service); ok && selects(svc.Spec.Selector, podLabels) {
				out = append(out, svc)
			}
		}
		return nil
	}
	if err := add(namespace + "/"); err != nil {
		return nil, err
	}
	for k, v := range podLabels {
		if err := add(labelIndexKey(namespace, k, v)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

type scanningServices struct{ lister corelisters.ServiceLister }

func (s scanningServices) Selecting(namespace string, podLabels map[string]string) ([]*v1.Service, error) {
	all, err := s.lister.Services(namespace).List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("listing Services of %q: %w", namespace, err)
	}
	var out []*v1.Service
	for _, svc := range all {
		if svc.Spec.Selector != nil && selects(svc.Spec.Selector, podLabels) {
			out = append(out, svc)
		}
	}
	return out, nil
}

// selects is equality-based set selection, the only kind a Service selector has.
func selects(selector, podLabels map[string]string) bool {
	for k, v := range selector {
		if pv, ok := podLabels[k]; !ok || pv != v {
			return false
		}
	}
	return true
}
