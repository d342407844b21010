package servicelb

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	v1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kcm-split/kcm-split/services/servicelb/addrpool"
	"github.com/kcm-split/kcm-split/services/servicelb/poolsource"
	"github.com/kcm-split/kcm-split/shared/ipclaim"
)

// Address claims.
//
// Every address this controller shows in a Service's status is first claimed by creating a
// networking.k8s.io/v1 IPAddress named after it. The API server lets only one object of a name
// exist, so two allocators that do not know of each other (a split brain, two processes run
// with --leader-elect=false) cannot both give one address away: the loser's create fails with
// AlreadyExists and it picks another address.
//
// IPAddress rather than an object of our own because kube-apiserver already treats it as "this
// address is taken": its ClusterIP allocator skips addresses that have one, so a pool
// overlapping a ServiceCIDR by mistake does not produce a ClusterIP equal to a load balancer
// address. Checked in kube-apiserver v1.36 (behaviour only): its IPAddress repair loop lists
// and garbage-collects only objects labelled managed-by ipallocator.k8s.io and skips every
// other object it is told about; it looks other objects up only by the name of a Service's
// ClusterIP (so, again, only inside a ServiceCIDR); validation asks for a canonical IP as the
// name and a parentRef with resource and name, and nothing about ServiceCIDRs. The ServiceCIDR
// controller only looks at IPAddresses inside a ServiceCIDR being deleted. So claims outside
// every ServiceCIDR are left alone and raise no Events.
//
// The protocol (create, taken detection, UID-conditioned delete, sweep) is shared/ipclaim's,
// shared with nodelifecycle's IPAM; what a claim's owner is, when it is an orphan, and the
// Events and metrics are this file's.
const (
	// ClaimManagedBy is the ipaddress.kubernetes.io/managed-by label value of our claims.
	ClaimManagedBy = ControllerID + ".kcm-split.io"
	// AnnotationClaimPool records the pool the address came from, so that after a restart a
	// pool edit that removed it is still told apart from a pool that was deleted.
	AnnotationClaimPool = "lb.kcm-split.io/pool"
	// AnnotationClaimServiceUID is the UID of the Service the claim was made for: a Service
	// re-created under the same name does not inherit it.
	AnnotationClaimServiceUID = "lb.kcm-split.io/service-uid"
)

// claimGrace is how old a claim must be before the orphan sweep looks at it: a claim is
// created just before the status write that shows it, possibly by another process.
const claimGrace = time.Minute

// claimSweepPeriod is how often orphan claims are looked for (and once at start).
const claimSweepPeriod = 5 * time.Minute

// onClaimDelete: an address may have become free (another process released it).
func (c *Controller) onClaimDelete(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	ip, ok := obj.(*networkingv1.IPAddress)
	if !ok {
		return
	}
	if parent := claimParent(ip); parent != "" {
		c.queue.Add(parent)
	}
	a, err := netip.ParseAddr(ip.Name)
	c.apply(c.state.ClaimDeleted(a, err == nil))
}

// claimSelector selects our claims.
func claimSelector() labels.Selector { return ipclaim.Selector(ClaimManagedBy) }

func claimName(a netip.Addr) string { return ipclaim.Name(a) }

// claimParent is the key of the Service the claim names, or "".
func claimParent(ip *networkingv1.IPAddress) string {
	ns, name, ok := ipclaim.Parent(ip, "services")
	if !ok {
		return ""
	}
	return ns + "/" + name
}

// claimedFor returns the addresses this controller's claims (in its cache) hold for svc
// itself: naming it as parent, made for its UID.
func (c *Controller) claimedFor(svc *v1.Service) []netip.Addr {
	all, err := c.claims.List(claimSelector())
	if err != nil {
		return nil
	}
	key := svc.Namespace + "/" + svc.Name
	var out []netip.Addr
	for _, claim := range all {
		if claimParent(claim) != key || claim.Annotations[AnnotationClaimServiceUID] != string(svc.UID) {
			continue
		}
		if a, err := netip.ParseAddr(claim.Name); err == nil {
			out = append(out, a)
		}
	}
	return out
}

// newClaim is the IPAddress claiming a for svc; pool is where it came from, if known.
func newClaim(svc *v1.Service, a netip.Addr, pool string) *networkingv1.IPAddress {
	fam := v1.IPv4Protocol
	if addrpool.FamilyOf(a) == addrpool.IPv6 {
		fam = v1.IPv6Protocol
	}
	ip := ipclaim.Object(claimName(a), ClaimManagedBy, networkingv1.ParentReference{
		Resource: "services", Namespace: svc.Namespace, Name: svc.Name,
	})
	ip.Labels[networkingv1.LabelIPAddressFamily] = string(fam)
	ip.Annotations[AnnotationClaimServiceUID] = string(svc.UID)
	if pool != "" {
		ip.Annotations[AnnotationClaimPool] = pool
	}
	if k := poolsource.SharingKey(svc); k != "" {
		ip.Annotations[poolsource.AnnotationAllowSharedIP] = k
	}
	return ip
}

// claimTakenError says that another Service owns the claim of an address.
type claimTakenError struct {
	addr  netip.Addr
	owner string
	key   string // the owner's sharing key
}

func (e *claimTakenError) Error() string {
	return fmt.Sprintf("address %s is claimed by Service %s (IPAddress object)", e.addr, e.owner)
}

// claimMayUse reports whether svc may show the address claim stands for: the claim is its
// own, or both carry the same sharing key (the allocator has checked ports and policies).
func claimMayUse(claim *networkingv1.IPAddress, svc *v1.Service) bool {
	if claimParent(claim) == svc.Namespace+"/"+svc.Name {
		uid := claim.Annotations[AnnotationClaimServiceUID]
		return uid == "" || svc.UID == "" || uid == string(svc.UID)
	}
	k := poolsource.SharingKey(svc)
	return k != "" && claim.Annotations[poolsource.AnnotationAllowSharedIP] == k
}

// ensureClaim makes sure a is claimed for svc, or returns a *claimTakenError. For an address
// the Service shows already the cached claim is enough; one about to be shown is checked
// against the API server (a create, then a read on AlreadyExists), because a cache that is
// behind may still show a claim that was deleted and made again for another Service.
func (c *Controller) ensureClaim(ctx context.Context, svc *v1.Service, a netip.Addr, pool string, shown bool) error {
	if cur, err := c.claims.Get(claimName(a)); shown && err == nil && claimMayUse(cur, svc) {
		return nil
	}
	res, err := ipclaim.Claim(ctx, c.client.NetworkingV1().IPAddresses(), newClaim(svc, a, pool), func(cur *networkingv1.IPAddress) bool {
		return claimMayUse(cur, svc)
	})
	var readErr *ipclaim.ReadError
	switch {
	case errors.Is(err, ipclaim.ErrVanished):
		return fmt.Errorf("claiming %s: the claim disappeared while being read; retrying", a)
	case errors.As(err, &readErr):
		return fmt.Errorf("reading the claim of %s: %w", a, readErr.Err)
	case err != nil:
		return fmt.Errorf("claiming %s: %w", a, err)
	case res.Created:
		klog.FromContext(ctx).V(2).Info("Claimed address", "address", a)
		return nil
	case !res.Taken:
		return nil
	}
	cur := res.Object
	owner := claimParent(cur)
	if owner == "" {
		owner = "<not a Service: " + cur.Labels[networkingv1.LabelManagedBy] + ">"
	}
	c.metrics.claimConflicts.Inc()
	return &claimTakenError{addr: a, owner: owner, key: cur.Annotations[poolsource.AnnotationAllowSharedIP]}
}

// deleteClaim deletes the claim of a if it is key's (or carries uid when uid is given),
// with the claim's UID as a precondition so that a claim made meanwhile for another Service
// is never deleted.
func (c *Controller) deleteClaim(ctx context.Context, key string, a netip.Addr, uid types.UID) error {
	o, err := ipclaim.DeleteIfMine(ctx, c.client.NetworkingV1().IPAddresses(), claimName(a), func(cur *networkingv1.IPAddress) bool {
		return ipclaim.ManagedBy(cur, ClaimManagedBy) && claimParent(cur) == key && (uid == "" || cur.UID == uid)
	})
	if o == ipclaim.Deleted {
		klog.FromContext(ctx).V(2).Info("Released address claim", "address", a, "service", key)
	}
	return err
}

// sweepClaims deletes our claims whose Service is verifiably gone (a live GET says NotFound,
// or the Service of that name is a newer one) or no longer wants a load balancer of ours, and
// that no live Service holds any more. A cache miss alone never deletes a claim.
func (c *Controller) sweepClaims(ctx context.Context) {
	logger := klog.FromContext(ctx)
	all, err := c.claims.List(claimSelector())
	if err != nil {
		return
	}
	_ = ipclaim.Sweep(ctx, c.client.NetworkingV1().IPAddresses(), all,
		func(claim *networkingv1.IPAddress) (string, types.UID) { return claim.Name, claim.UID },
		c.orphanReason,
		func(claim *networkingv1.IPAddress, why string, o ipclaim.Outcome, err error) error {
			a, _ := netip.ParseAddr(claim.Name)
			parent := claimParent(claim)
			if o == ipclaim.Failed {
				logger.Error(err, "Cannot delete orphan address claim", "address", a, "service", parent)
				return nil
			}
			logger.Info("Deleted orphan address claim", "address", a, "service", parent, "reason", why)
			c.recorder.Eventf(claim, v1.EventTypeNormal, ReasonClaimReleased, "Deleted the claim of %s for Service %s: %s", a, parent, why)
			if o == ipclaim.AlreadyGone || why == whyServiceGone {
				c.state.OrphanDeleted(parent, a)
			}
			return nil
		})
}

const whyServiceGone = "its Service no longer exists"

// orphanReason says why claim is an orphan, verified by a live read of its Service: ok is
// false when it is not (or not yet, or cannot be told now), and the sweep keeps it.
func (c *Controller) orphanReason(ctx context.Context, claim *networkingv1.IPAddress) (why string, ok bool, _ error) {
	if time.Since(claim.CreationTimestamp.Time) < claimGrace {
		return "", false, nil
	}
	a, err := netip.ParseAddr(claim.Name)
	if err != nil {
		return "", false, nil
	}
	parent := claimParent(claim)
	if c.state.HeldByOthers(parent, a) || parent == "" {
		return "", false, nil // a sharing Service still shows it, or not a claim of ours to judge
	}
	ns, name, _ := cache.SplitMetaNamespaceKey(parent)
	svc, err := c.client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return whyServiceGone, true, nil
	case err != nil:
		return "", false, nil
	case claim.Annotations[AnnotationClaimServiceUID] != "" && string(svc.UID) != claim.Annotations[AnnotationClaimServiceUID]:
		return "its Service was deleted and re-created", true, nil
	case !handles(svc, c.opts.LoadBalancerClass) && !containsAddr(statusAddrs(svc), a) && !hasFinalizer(svc):
		// While the cleanup finalizer is on, the claim is what tells the Service's
		// cleanup that the finalizer is this controller's to remove; it deletes the
		// claim itself.
		return "its Service no longer wants a load balancer of this controller", true, nil
	case handles(svc, c.opts.LoadBalancerClass) && !containsAddr(statusAddrs(svc), a) && c.state.HoldsOther(parent, a):
		return "its Service holds another address of that family", true, nil
	}
	return "", false, nil
}
