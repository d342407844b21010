package namespace

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
	"k8s.io/klog/v2"
)

// contentClient is the part of the metadata client the deleter uses. Only object metadata
// travels: names, UIDs, finalizers, deletion timestamps. A fake in the unit tests implements
// the paging semantics of the real apiserver.
type contentClient interface {
	List(ctx context.Context, gvr schema.GroupVersionResource, ns string, opts metav1.ListOptions) (*metav1.PartialObjectMetadataList, error)
	DeleteCollection(ctx context.Context, gvr schema.GroupVersionResource, ns string, opts metav1.DeleteOptions, list metav1.ListOptions) error
	Delete(ctx context.Context, gvr schema.GroupVersionResource, ns, name string, opts metav1.DeleteOptions) error
}

// metadataContent adapts metadata.Interface to contentClient.
type metadataContent struct{ client metadata.Interface }

func (m metadataContent) List(ctx context.Context, gvr schema.GroupVersionResource, ns string, opts metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
	return m.client.Resource(gvr).Namespace(ns).List(ctx, opts)
}

func (m metadataContent) DeleteCollection(ctx context.Context, gvr schema.GroupVersionResource, ns string, opts metav1.DeleteOptions, list metav1.ListOptions) error {
	return m.client.Resource(gvr).Namespace(ns).DeleteCollection(ctx, opts, list)
}

func (m metadataContent) Delete(ctx context.Context, gvr schema.GroupVersionResource, ns, name string, opts metav1.DeleteOptions) error {
	return m.client.Resource(gvr).Namespace(ns).Delete(ctx, name, opts)
}

// finalizerEstimate is how long an object held by finalizers is expected to take, upstream's
// assumption: long enough for the garbage collector or an operator to act, short enough to
// notice progress.
const finalizerEstimate = 15 * time.Second

// Concurrency inside one namespace. The client's rate limiter bounds the total anyway; these
// keep a single namespace from queueing hundreds of requests at once.
const (
	// resourceWorkers is how many resources of one namespace are emptied at the same time.
	resourceWorkers = 8
	// pageWorkers is how many pages of one resource are deleted at the same time.
	pageWorkers = 4
)

// opKey names an operation on a resource, for the memory of unsupported operations.
type opKey struct {
	gvr  schema.GroupVersionResource
	verb string
}

// outcome is what emptying one resource of one namespace found.
type outcome struct {
	gvr schema.GroupVersionResource
	// deleted counts the objects this pass asked the apiserver to delete.
	deleted int
	// remaining counts the objects still there afterwards, finalizers the finalizers they
	// carry (name -> number of objects).
	remaining  int
	finalizers map[string]int
	// wait estimates how long the remaining objects take to go.
	wait time.Duration
	err  error
	// aborted means the namespace was replaced under the deleter (same name, new UID).
	aborted bool
}

// deleter empties one resource of one namespace.
type deleter struct {
	content  contentClient
	pageSize int64
	now      func() time.Time
	// bulk bounds deletecollection calls across the whole process: each one makes the
	// apiserver delete a page of objects, the heaviest request this controller sends.
	bulk chan struct{}

	unsupported sync.Map // opKey -> struct{}: learned from 405 Method Not Allowed
}

func (d *deleter) can(r resource, verb string) bool {
	if !r.supports(verb) {
		return false
	}
	_, no := d.unsupported.Load(opKey{r.GVR, verb})
	return !no
}

// remember records that verb is not allowed on r (the apiserver said 405), so later passes
// do not try again. Discovery usually says so first; some aggregated APIs do not.
func (d *deleter) remember(ctx context.Context, r resource, verb string) {
	if _, loaded := d.unsupported.LoadOrStore(opKey{r.GVR, verb}, struct{}{}); !loaded {
		klog.FromContext(ctx).V(2).Info("Operation not supported, not trying again", "resource", r.GVR.String(), "verb", verb)
	}
}

// backgroundDelete asks the garbage collector to remove dependents later rather than
// adding the orphan finalizer: the namespace is going away with everything in it.
func backgroundDelete() metav1.DeleteOptions {
	p := metav1.DeletePropagationBackground
	return metav1.DeleteOptions{PropagationPolicy: &p}
}

// empty deletes every object of r in namespace ns and reports what is left. Pass one lists
// the collection in pages and deletes each page (one deletecollection bounded by the page's
// continue token, or one delete per object) while listing goes on; pages whose objects all
// have a deletion timestamp already are skipped, so a namespace waiting on finalizers costs
// lists, not deletes. Pass two lists again to count what is left. ours reports whether the
// namespace is still the one being deleted.
func (d *deleter) empty(ctx context.Context, ns string, r resource, ours func() bool) outcome {
	out := outcome{gvr: r.GVR}
	if !d.can(r, verbList) {
		// Nothing to page over or verify with: one unbounded deletecollection, if allowed.
		if d.can(r, verbDeleteCollection) {
			err := d.content.DeleteCollection(ctx, r.GVR, ns, backgroundDelete(), metav1.ListOptions{})
			switch {
			case apierrors.IsMethodNotSupported(err):
				d.remember(ctx, r, verbDeleteCollection)
			case err != nil && !apierrors.IsNotFound(err):
				out.err = err
			}
		}
		return out
	}

	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
		sem  = make(chan struct{}, pageWorkers)
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	saw := false
	token := ""
	for {
		if !ours() {
			out.aborted = true
			break
		}
		page, err := d.content.List(ctx, r.GVR, ns, metav1.ListOptions{Limit: d.pageSize, Continue: token})
		if err != nil {
			switch {
			case apierrors.IsMethodNotSupported(err):
				d.remember(ctx, r, verbList)
			case apierrors.IsNotFound(err):
				// The resource went away (a CRD deleted): nothing of it is left.
			default:
				fail(fmt.Errorf("listing: %w", err))
			}
			break
		}
		pageToken := token
		token = page.Continue
		var todo []metav1.PartialObjectMetadata
		for _, item := range page.Items {
			if item.DeletionTimestamp == nil {
				todo = append(todo, item)
			}
		}
		saw = saw || len(page.Items) > 0
		if len(todo) > 0 {
			out.deleted += len(todo)
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				if err := d.deletePage(ctx, ns, r, pageToken, todo); err != nil {
					fail(err)
				}
			})
		}
		if token == "" {
			break
		}
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		out.err = err
		return out
	}
	if !saw || out.aborted {
		return out
	}
	d.count(ctx, ns, r, &out)
	return out
}

// deletePage deletes the objects of one page: with deletecollection bounded by the page's
// continue token and the page size when the resource allows it (the apiserver lists exactly
// this page again and deletes it), otherwise one by one.
func (d *deleter) deletePage(ctx context.Context, ns string, r resource, token string, items []metav1.PartialObjectMetadata) error {
	if d.can(r, verbDeleteCollection) {
		d.bulk <- struct{}{}
		err := d.content.DeleteCollection(ctx, r.GVR, ns, backgroundDelete(), metav1.ListOptions{Limit: d.pageSize, Continue: token})
		<-d.bulk
		switch {
		case err == nil, apierrors.IsNotFound(err):
			return nil
		case apierrors.IsMethodNotSupported(err):
			d.remember(ctx, r, verbDeleteCollection)
		default:
			return fmt.Errorf("deleting a page: %w", err)
		}
	}
	var errs []error
	for _, item := range items {
		opts := backgroundDelete()
		// The UID precondition makes sure a replacement object of the same name is not
		// deleted in its place.
		opts.Preconditions = &metav1.Preconditions{UID: &item.UID}
		err := d.content.Delete(ctx, r.GVR, ns, item.Name, opts)
		switch {
		case err == nil, apierrors.IsNotFound(err), apierrors.IsConflict(err):
		case apierrors.IsMethodNotSupported(err):
			d.remember(ctx, r, verbDelete)
			return nil
		default:
			errs = append(errs, fmt.Errorf("deleting %s: %w", item.Name, err))
		}
	}
	return errors.Join(errs...)
}

// count lists what is left of r and estimates how long it takes to go: until the latest
// deletion timestamp for objects in graceful deletion (Pods), finalizerEstimate for objects
// held by finalizers or past their deadline. An object with no deletion timestamp after the
// delete pass is an error: its delete did not happen.
func (d *deleter) count(ctx context.Context, ns string, r resource, out *outcome) {
	now := d.now()
	undeleted := 0
	token := ""
	for {
		page, err := d.content.List(ctx, r.GVR, ns, metav1.ListOptions{Limit: d.pageSize, Continue: token})
		if err != nil {
			if !apierrors.IsNotFound(err) {
				out.err = fmt.Errorf("listing what is left: %w", err)
			}
			return
		}
		for _, item := range page.Items {
			out.remaining++
			for _, f := range item.Finalizers {
				if out.finalizers == nil {
					out.finalizers = map[string]int{}
				}
				out.finalizers[f]++
			}
			switch {
			case item.DeletionTimestamp == nil:
				undeleted++
			case len(item.Finalizers) > 0:
				out.wait = max(out.wait, finalizerEstimate)
			default:
				left := item.DeletionTimestamp.Sub(now)
				if left <= 0 {
					left = finalizerEstimate
				}
				out.wait = max(out.wait, left)
			}
		}
		token = page.Continue
		if token == "" {
			break
		}
	}
	if undeleted > 0 {
		out.err = fmt.Errorf("%d objects remain without a deletion timestamp after being deleted", undeleted)
	}
}

// requeueDelay maps the estimate of the remaining graceful termination to when to look
// again: halfway through plus a second, as upstream does, so progress is noticed without
// polling; never later than one sync period.
func requeueDelay(estimate, syncPeriod time.Duration) time.Duration {
	secs := (estimate + time.Second - 1) / time.Second
	d := secs*time.Second/2 + time.Second
	return min(d, syncPeriod)
}
