package namespace

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
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

// namedPerEntry bounds how many remaining objects a condition names per resource and per
// finalizer: enough to find the culprit, short enough for a condition message.
const namedPerEntry = 3

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

// outcome is what deleting all of one resource of one namespace found.
type outcome struct {
	gvr schema.GroupVersionResource
	// deleted counts the objects this sync asked the apiserver to delete.
	deleted int
	// remaining counts the objects still there afterwards, finalizers the finalizers they
	// carry (name -> number of objects).
	remaining  int
	finalizers map[string]int
	// names are the first few remaining objects ("Kind/name", at most namedPerEntry), and
	// finalizerNames the first few per finalizer: enough for a person to find them.
	names          []string
	finalizerNames map[string][]string
	// wait estimates how long the remaining objects take to go.
	wait time.Duration
	err  error
	// stopped says why deleting stopped early: the namespace was gone or replaced (same
	// name, new UID) when checked before a delete. Empty: it did not stop.
	stopped string
}

// Reasons a sync stops before deleting, the values of the reason label of
// kcm_split_namespace_deletion_stopped_total.
const (
	// StopGone: no namespace of that name exists any more.
	StopGone = "gone"
	// StopReplaced: a namespace of that name exists but it is another one (new UID), or it
	// is not being deleted.
	StopReplaced = "replaced"
)

// errStopped is what a guard returns when the namespace is no longer the one being deleted.
type errStopped struct{ reason string }

func (e *errStopped) Error() string { return "namespace " + e.reason }

// guard confirms, with a live read, that the namespace is still the one being deleted. It
// returns nil if so, an *errStopped if it is gone or replaced, or the error of the read:
// a namespace that cannot be checked is not deleted from.
type guard func(ctx context.Context) error

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

// remember records that verb is not allowed on r (the apiserver said 405), so later syncs
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

// deleteAll deletes every object of r in namespace ns and reports what is left. First it lists
// the collection in pages and deletes each page (one deletecollection bounded by the page's
// continue token, or one delete per object) while listing goes on; pages whose objects all
// have a deletion timestamp already are skipped, so a namespace waiting on finalizers costs
// lists, not deletes. Then it lists again to count what is left. check runs right before
// each page's deletes: once it says the namespace is gone or replaced, nothing more is
// deleted.
func (d *deleter) deleteAll(ctx context.Context, ns string, r resource, check guard) outcome {
	if !d.can(r, verbList) {
		return d.deleteUnlisted(ctx, ns, r, check)
	}
	out := outcome{gvr: r.GVR}
	run := &pages{check: check, sem: make(chan struct{}, pageWorkers)}
	saw := false
	token := ""
	for {
		if run.stopped.Load() != nil {
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
				run.fail(fmt.Errorf("listing: %w", err))
			}
			break
		}
		// The first page's deletecollection lists at the revision this list was served at,
		// later pages at the revision pinned in their continue token: a deletecollection
		// never reaches objects created after the check that preceded it.
		pageToken, pageRV := token, ""
		if token == "" {
			pageRV = page.ResourceVersion
		}
		token = page.Continue
		todo := notDeleting(page.Items)
		saw = saw || len(page.Items) > 0
		if len(todo) > 0 {
			out.deleted += len(todo)
			run.sem <- struct{}{}
			run.wg.Go(func() {
				defer func() { <-run.sem }()
				if err := d.deletePage(ctx, ns, r, pageToken, pageRV, todo, run.checked); err != nil {
					run.fail(err)
				}
			})
		}
		if token == "" {
			break
		}
	}
	run.wg.Wait()
	if reason, ok := run.stopped.Load().(string); ok {
		out.stopped = reason
		return out
	}
	if err := errors.Join(run.errs...); err != nil {
		out.err = err
		return out
	}
	if !saw {
		return out
	}
	d.count(ctx, ns, r, &out)
	return out
}

// deleteUnlisted is deleteAll for a resource that cannot be listed: nothing to page over or
// verify with, so one unbounded deletecollection, if allowed.
func (d *deleter) deleteUnlisted(ctx context.Context, ns string, r resource, check guard) outcome {
	out := outcome{gvr: r.GVR}
	if !d.can(r, verbDeleteCollection) {
		return out
	}
	if err := check(ctx); err != nil {
		out.stopped, out.err = stopReason(err)
		return out
	}
	err := d.content.DeleteCollection(ctx, r.GVR, ns, backgroundDelete(), metav1.ListOptions{})
	switch {
	case apierrors.IsMethodNotSupported(err):
		d.remember(ctx, r, verbDeleteCollection)
	case err != nil && !apierrors.IsNotFound(err):
		out.err = err
	}
	return out
}

// pages is the state deleteAll shares with the goroutines deleting its pages.
type pages struct {
	check guard
	sem   chan struct{} // bounds the pages deleted at once to pageWorkers
	wg    sync.WaitGroup

	stopped atomic.Value // string: the first stop reason a page's check found
	mu      sync.Mutex
	errs    []error
}

func (p *pages) fail(err error) {
	p.mu.Lock()
	p.errs = append(p.errs, err)
	p.mu.Unlock()
}

// checked runs the guard before a page's deletes and records why it stopped, if it did.
func (p *pages) checked(ctx context.Context) bool {
	if p.stopped.Load() != nil {
		return false
	}
	reason, err := stopReason(p.check(ctx))
	switch {
	case reason != "":
		p.stopped.CompareAndSwap(nil, reason)
		return false
	case err != nil:
		p.fail(fmt.Errorf("checking the namespace before deleting: %w", err))
		return false
	}
	return true
}

// notDeleting returns the items without a deletion timestamp: those a delete still changes.
func notDeleting(items []metav1.PartialObjectMetadata) []metav1.PartialObjectMetadata {
	var todo []metav1.PartialObjectMetadata
	for _, item := range items {
		if item.DeletionTimestamp == nil {
			todo = append(todo, item)
		}
	}
	return todo
}

// stopReason splits a guard's answer into a stop reason (gone, replaced) or another error.
func stopReason(err error) (string, error) {
	var s *errStopped
	if errors.As(err, &s) {
		return s.reason, nil
	}
	return "", err
}

// deletePage deletes the objects of one page, once check confirmed the namespace is still
// the one being deleted: with deletecollection bounded by the page's continue token (or, for
// the first page, the revision rv it was listed at) and the page size when the resource
// allows it (the apiserver lists exactly this page again and deletes it), otherwise one by
// one, each with its UID as a precondition. deletecollection takes no precondition that
// could name the namespace; the check and the pinned revision leave only the moment between
// the check and the request, and a namespace cannot be finalized, deleted and created again
// with new content within it unless another writer finalizes it meanwhile.
func (d *deleter) deletePage(ctx context.Context, ns string, r resource, token, rv string, items []metav1.PartialObjectMetadata, checked func(context.Context) bool) error {
	if d.can(r, verbDeleteCollection) {
		d.bulk <- struct{}{}
		if !checked(ctx) {
			<-d.bulk
			return nil
		}
		opts := metav1.ListOptions{Limit: d.pageSize, Continue: token}
		if rv != "" {
			opts.ResourceVersion, opts.ResourceVersionMatch = rv, metav1.ResourceVersionMatchExact
		}
		err := d.content.DeleteCollection(ctx, r.GVR, ns, backgroundDelete(), opts)
		<-d.bulk
		switch {
		case err == nil, apierrors.IsNotFound(err):
			return nil
		case apierrors.IsMethodNotSupported(err):
			d.remember(ctx, r, verbDeleteCollection)
		default:
			return fmt.Errorf("deleting a page: %w", err)
		}
	} else if !checked(ctx) {
		return nil
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
// deletes is an error: its delete did not happen.
func (d *deleter) count(ctx context.Context, ns string, r resource, out *outcome) {
	now := d.now()
	undeleted := 0
	kind := r.Kind
	if kind == "" {
		kind = r.GVR.Resource
	}
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
			name := kind + "/" + item.Name
			if len(out.names) < namedPerEntry {
				out.names = append(out.names, name)
			}
			for _, f := range item.Finalizers {
				if out.finalizers == nil {
					out.finalizers, out.finalizerNames = map[string]int{}, map[string][]string{}
				}
				out.finalizers[f]++
				if len(out.finalizerNames[f]) < namedPerEntry {
					out.finalizerNames[f] = append(out.finalizerNames[f], name)
				}
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
