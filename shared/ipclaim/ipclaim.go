// Package ipclaim is the address-claim protocol that service-lb-controller (load balancer
// addresses) and nodelifecycle's IPAM (Pod CIDR ranges) share: an address is taken by
// creating a networking.k8s.io/v1 IPAddress named for it, given back by a delete conditioned
// on the claim's UID, and a claim whose owner is verifiably gone is swept.
//
// No library serves this: kube-apiserver's ipallocator (k8s.io/kubernetes) is an internal
// package of a module that is not importable as a library, and it allocates ClusterIPs for
// Services only.
//
// The apiserver lets one object of a name exist, so it is the arbiter: of two processes
// that do not know of each other (a split brain, two replicas run with
// --leader-elect=false) creating the claim of one address, exactly one create succeeds and
// the other answers AlreadyExists. The loser reads the live claim: it may be its own (an
// earlier try whose answer was lost), which the caller tells by the claim's parentRef and
// labels; otherwise the address is taken.
//
// What "owner" means, which Events and metrics a claim causes, and when a claim is judged
// orphaned stay with each controller; this package holds only the protocol.
package ipclaim

import (
	"context"
	"errors"
	"net/netip"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	networkingclient "k8s.io/client-go/kubernetes/typed/networking/v1"
)

// Client is the IPAddress API claims are written through.
type Client = networkingclient.IPAddressInterface

// Name is the IPAddress name that claims a: its canonical text form, the only name the
// apiserver's validation accepts.
func Name(a netip.Addr) string { return a.String() }

// Selector selects the claims labelled managed-by manager: each controller's informer lists
// only its own, never the cluster's ClusterIP IPAddresses.
func Selector(manager string) labels.Selector {
	return labels.SelectorFromSet(labels.Set{networkingv1.LabelManagedBy: manager})
}

// ManagedBy reports whether ip carries manager's managed-by label.
func ManagedBy(ip *networkingv1.IPAddress, manager string) bool {
	return ip.Labels[networkingv1.LabelManagedBy] == manager
}

// Object is the claim of the address name by manager for parent, with the managed-by label
// and an empty annotation map; the caller adds its own labels and annotations.
func Object(name, manager string, parent networkingv1.ParentReference) *networkingv1.IPAddress {
	return &networkingv1.IPAddress{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Labels:      map[string]string{networkingv1.LabelManagedBy: manager},
			Annotations: map[string]string{},
		},
		Spec: networkingv1.IPAddressSpec{ParentRef: &parent},
	}
}

// Parent returns the namespace and name of ip's parent when it is an object of the core
// group's resource (for example "services", "nodes"); ok is false otherwise.
func Parent(ip *networkingv1.IPAddress, resource string) (namespace, name string, ok bool) {
	ref := ip.Spec.ParentRef
	if ref == nil || ref.Group != "" || ref.Resource != resource {
		return "", "", false
	}
	return ref.Namespace, ref.Name, true
}

// Result is what Claim found.
type Result struct {
	// Object is the claim: the one created, or the live one of that name.
	Object *networkingv1.IPAddress
	// Created reports that this call created the claim.
	Created bool
	// Taken reports that the claim exists and is not the caller's: another owner holds the
	// address.
	Taken bool
}

// ErrVanished says that a claim answered AlreadyExists and then NotFound: it was released
// between the create and the read. The address may be free; the caller tries again.
var ErrVanished = errors.New("the claim was deleted between the create and the read")

// ReadError wraps the failure of the read that follows an AlreadyExists.
type ReadError struct{ Err error }

func (e *ReadError) Error() string { return "reading the existing claim: " + e.Err.Error() }

// Unwrap returns the read's error.
func (e *ReadError) Unwrap() error { return e.Err }

// Claim creates want. When an object of that name exists already, it is read from the
// apiserver (never from a cache, which may still show a claim that was deleted and made again
// for another owner) and mine says whether it is the caller's own claim. Errors: the create's
// own error when it failed otherwise, ErrVanished, or a *ReadError.
func Claim(ctx context.Context, client Client, want *networkingv1.IPAddress, mine func(*networkingv1.IPAddress) bool) (Result, error) {
	created, err := client.Create(ctx, want, metav1.CreateOptions{})
	if err == nil {
		return Result{Object: created, Created: true}, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return Result{}, err
	}
	cur, err := client.Get(ctx, want.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return Result{}, ErrVanished
	}
	if err != nil {
		return Result{}, &ReadError{Err: err}
	}
	return Result{Object: cur, Taken: !mine(cur)}, nil
}

// Outcome is what a conditioned delete of a claim did.
type Outcome int

const (
	// Deleted: this delete removed the claim.
	Deleted Outcome = iota
	// AlreadyGone: no claim of that name exists (NotFound).
	AlreadyGone
	// Replaced: a claim of that name exists but is another object (the UID precondition
	// failed): someone claimed the address again; it is left alone.
	Replaced
	// Failed: the delete failed otherwise; the error says how.
	Failed
	// NotMine: the live claim is not the caller's; nothing was deleted (DeleteIfMine only).
	NotMine
)

// String names the outcome for logs.
func (o Outcome) String() string {
	switch o {
	case Deleted:
		return "deleted"
	case AlreadyGone:
		return "already gone"
	case Replaced:
		return "replaced"
	case NotMine:
		return "not mine"
	default:
		return "failed"
	}
}

// Delete deletes the claim name only if it is still the object of uid, so that a process
// never deletes a claim another one made again for the same address meanwhile.
func Delete(ctx context.Context, client Client, name string, uid types.UID) (Outcome, error) {
	err := client.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	switch {
	case err == nil:
		return Deleted, nil
	case apierrors.IsNotFound(err):
		return AlreadyGone, nil
	case apierrors.IsConflict(err):
		return Replaced, nil
	default:
		return Failed, err
	}
}

// DeleteIfMine reads the claim name from the apiserver and, when mine says it is the
// caller's, deletes it on the UID read (see Delete).
func DeleteIfMine(ctx context.Context, client Client, name string, mine func(*networkingv1.IPAddress) bool) (Outcome, error) {
	cur, err := client.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return AlreadyGone, nil
	}
	if err != nil {
		return Failed, err
	}
	if !mine(cur) {
		return NotMine, nil
	}
	return Delete(ctx, client, cur.Name, cur.UID)
}

// Sweep deletes the claims among candidates whose owner is verifiably gone, one at a time and
// each on its own UID (see Delete). claim names a candidate's IPAddress and UID. gone judges a
// candidate: ok with the reason when its owner is verifiably gone, not ok to keep it (a
// cache miss alone must never be enough), or an error that ends the sweep before anything
// more is deleted. done is told what each delete did, errors included; an error it returns
// ends the sweep too.
func Sweep[T any](ctx context.Context, client Client, candidates []T,
	claim func(T) (string, types.UID),
	gone func(context.Context, T) (why string, ok bool, err error),
	done func(c T, why string, o Outcome, err error) error,
) error {
	for _, c := range candidates {
		why, ok, err := gone(ctx, c)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		name, uid := claim(c)
		o, err := Delete(ctx, client, name, uid)
		if err := done(c, why, o, err); err != nil {
			return err
		}
	}
	return nil
}
