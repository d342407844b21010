package namespace

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// fakeContent is an in-memory contentClient with the apiserver's semantics where they
// matter here: pages bounded by limit and resumed by continue token (the name to start
// after), deletecollection bounded the same way, graceful deletion and finalizers.
type fakeContent struct {
	mu    sync.Mutex
	now   func() time.Time
	objs  map[schema.GroupVersionResource]map[string]map[string]*metav1.PartialObjectMetadata // gvr -> ns -> name
	calls []string
	// graceful makes deletes of a resource set a deletion timestamp this far ahead
	// instead of removing the object (Pods on a node).
	graceful map[schema.GroupVersionResource]time.Duration
	// notAllowed answers 405 to verb on a resource; failing answers 500 to any call.
	notAllowed map[opKey]bool
	failing    map[schema.GroupVersionResource]bool
	// failListAfter makes lists of a resource fail (500) after this many went through.
	failListAfter map[schema.GroupVersionResource]int
	lists         map[schema.GroupVersionResource]int
	maxLimit      int64
}

func newFakeContent(now func() time.Time) *fakeContent {
	return &fakeContent{
		now:        now,
		objs:       map[schema.GroupVersionResource]map[string]map[string]*metav1.PartialObjectMetadata{},
		graceful:   map[schema.GroupVersionResource]time.Duration{},
		notAllowed: map[opKey]bool{},
		failing:    map[schema.GroupVersionResource]bool{},
		lists:      map[schema.GroupVersionResource]int{},
	}
}

func (f *fakeContent) add(gvr schema.GroupVersionResource, ns string, n int, finalizers ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.objs[gvr] == nil {
		f.objs[gvr] = map[string]map[string]*metav1.PartialObjectMetadata{}
	}
	if f.objs[gvr][ns] == nil {
		f.objs[gvr][ns] = map[string]*metav1.PartialObjectMetadata{}
	}
	base := len(f.objs[gvr][ns])
	for i := range n {
		name := fmt.Sprintf("%s-%05d", gvr.Resource, base+i)
		f.objs[gvr][ns][name] = &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: ns, UID: types.UID(ns + "/" + name), Finalizers: finalizers,
		}}
	}
}

func (f *fakeContent) count(gvr schema.GroupVersionResource, ns string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.objs[gvr][ns])
}

// removeFinalizers plays the owner of a finalizer: objects being deleted go.
func (f *fakeContent) removeFinalizers(gvr schema.GroupVersionResource, ns string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for name, o := range f.objs[gvr][ns] {
		o.Finalizers = nil
		if o.DeletionTimestamp != nil {
			delete(f.objs[gvr][ns], name)
		}
	}
}

func (f *fakeContent) callsOf(prefix string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.calls {
		if strings.HasPrefix(c, prefix) {
			out = append(out, c)
		}
	}
	return out
}

func (f *fakeContent) check(verb string, gvr schema.GroupVersionResource, limit int64) error {
	if f.failing[gvr] {
		return apierrors.NewInternalError(fmt.Errorf("%s broken", gvr.Resource))
	}
	if f.notAllowed[opKey{gvr, verb}] {
		return apierrors.NewMethodNotSupported(gvr.GroupResource(), verb)
	}
	if f.maxLimit > 0 && (limit == 0 || limit > f.maxLimit) && verb != verbDelete {
		return fmt.Errorf("%s %s with limit %d, more than %d", verb, gvr.Resource, limit, f.maxLimit)
	}
	return nil
}

// page returns the sorted names after token, at most limit (0: all), and the next token.
func (f *fakeContent) page(gvr schema.GroupVersionResource, ns string, opts metav1.ListOptions) ([]string, string) {
	var names []string
	for name := range f.objs[gvr][ns] {
		if name > opts.Continue {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	if opts.Limit > 0 && int64(len(names)) > opts.Limit {
		names = names[:opts.Limit]
		return names, names[len(names)-1]
	}
	return names, ""
}

func (f *fakeContent) List(_ context.Context, gvr schema.GroupVersionResource, ns string, opts metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf("list %s %s", gvr.Resource, ns))
	if err := f.check(verbList, gvr, opts.Limit); err != nil {
		return nil, err
	}
	if n, ok := f.failListAfter[gvr]; ok && f.lists[gvr] >= n {
		return nil, apierrors.NewInternalError(fmt.Errorf("%s broken", gvr.Resource))
	}
	f.lists[gvr]++
	names, next := f.page(gvr, ns, opts)
	out := &metav1.PartialObjectMetadataList{ListMeta: metav1.ListMeta{Continue: next}}
	for _, n := range names {
		out.Items = append(out.Items, *f.objs[gvr][ns][n].DeepCopy())
	}
	return out, nil
}

func (f *fakeContent) DeleteCollection(_ context.Context, gvr schema.GroupVersionResource, ns string, _ metav1.DeleteOptions, opts metav1.ListOptions) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf("deletecollection %s %s", gvr.Resource, ns))
	if err := f.check(verbDeleteCollection, gvr, opts.Limit); err != nil {
		return err
	}
	names, _ := f.page(gvr, ns, opts)
	for _, n := range names {
		f.deleteLocked(gvr, ns, n)
	}
	return nil
}

func (f *fakeContent) Delete(_ context.Context, gvr schema.GroupVersionResource, ns, name string, opts metav1.DeleteOptions) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf("delete %s %s/%s", gvr.Resource, ns, name))
	if err := f.check(verbDelete, gvr, 0); err != nil {
		return err
	}
	o, ok := f.objs[gvr][ns][name]
	if !ok {
		return apierrors.NewNotFound(gvr.GroupResource(), name)
	}
	if opts.Preconditions != nil && opts.Preconditions.UID != nil && *opts.Preconditions.UID != o.UID {
		return apierrors.NewConflict(gvr.GroupResource(), name, fmt.Errorf("UID precondition failed"))
	}
	f.deleteLocked(gvr, ns, name)
	return nil
}

func (f *fakeContent) deleteLocked(gvr schema.GroupVersionResource, ns, name string) {
	o := f.objs[gvr][ns][name]
	grace, graceful := f.graceful[gvr]
	if len(o.Finalizers) == 0 && !graceful {
		delete(f.objs[gvr][ns], name)
		return
	}
	if o.DeletionTimestamp == nil {
		t := metav1.NewTime(f.now().Add(grace))
		o.DeletionTimestamp = &t
	}
}
