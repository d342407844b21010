package ipam

// Claims: the shared state that makes a range unique across allocators.
//
// An allocator's bitmap is its own view. Two allocators running at once (a split brain: two
// processes with --leader-elect=false, or an old leader still writing while a new one starts)
// would both hand out the first free range. So before a range is written to a Node it is
// claimed with an object only one writer can create: a networking.k8s.io/v1 IPAddress named
// by the range's network address in canonical form. The apiserver's create is the arbiter:
// AlreadyExists means someone else holds the range, and another one is taken.
//
// Why IPAddress (checked against kube-apiserver v1.36): its name is an IP address, it is
// cluster-scoped, served by default, and validation asks only for a parentRef with a
// resource and a name ("nodes" is fine) and any group, the core "" included. The apiserver's
// ClusterIP repair loop only ever lists and cleans up the IPAddresses labelled managed-by
// ipallocator.k8s.io, so ours, with their own label, are left alone wherever they lie,
// inside a ServiceCIDR or outside all of them. The one interaction: a Service whose ClusterIP
// equals a claim's name would have the repair loop replace the claim with the Service's own
// IPAddress. That needs the Service range to overlap the cluster CIDR, which is refused at
// start when --service-cluster-ip-range says so, and the ClusterIP allocator itself sees the
// name taken and skips that address.
//
// A claim names the Node it is for (spec.parentRef) and that Node's UID (a label), and the
// range itself (an annotation: the name gives only its first address). It is deleted, with
// its own UID as precondition, only when the Node is verified gone by a live read (NotFound,
// or a Node of that name with another UID), or when the Node has other ranges, which can
// never change once set. A miss in this process's cache is never enough.
//
// The protocol (create, taken detection, UID-conditioned delete, sweep) is shared/ipclaim's,
// shared with service-lb-controller; what a claim's owner is and when it is stale stay here.

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	v1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kcm-split/kcm-split/shared/ipclaim"
)

const (
	// ClaimManager is the managed-by label value of every claim, kcm-split's own, so that
	// the apiserver's ClusterIP repair loop and any other IPAddress owner leave claims alone.
	ClaimManager = "nodelifecycle-controller.kcm-split.io"
	// LabelClaimNodeUID carries the UID of the Node a claim is for.
	LabelClaimNodeUID = "ipam.kcm-split.io/node-uid"
	// AnnotationClaimRange carries the claimed range in CIDR form.
	AnnotationClaimRange = "ipam.kcm-split.io/range"
	// maxClaimTries bounds the ranges one sync tries to claim (each AlreadyExists costs a
	// create and a read); beyond it the sync fails and the queue retries with backoff.
	maxClaimTries = 8
	// maxPatchTries bounds the writes of one Node's ranges in one sync: each 409 re-reads the
	// Node and writes again on its latest version.
	maxPatchTries = 3
)

// ClaimSelector selects the claims of every nodelifecycle-controller: the informer lists
// only these.
func ClaimSelector() string { return ipclaim.Selector(ClaimManager).String() }

// claim is one IPAddress claiming a range for a Node.
type claim struct {
	name    string
	uid     types.UID // the IPAddress's own UID, the precondition of its delete
	r       netip.Prefix
	node    string
	nodeUID types.UID
}

// claimName is the IPAddress name for r: its network address, canonical.
func claimName(r netip.Prefix) string { return ipclaim.Name(r.Masked().Addr()) }

func (cl claim) is(node string, uid types.UID, r netip.Prefix) bool {
	return cl.node == node && cl.nodeUID == uid && cl.r == r
}

// newClaimObject is the IPAddress claiming r for node.
func newClaimObject(r netip.Prefix, node *v1.Node) *networkingv1.IPAddress {
	ip := ipclaim.Object(claimName(r), ClaimManager, networkingv1.ParentReference{Group: "", Resource: "nodes", Name: node.Name})
	ip.Labels[LabelClaimNodeUID] = string(node.UID)
	ip.Annotations[AnnotationClaimRange] = r.String()
	return ip
}

// claimFrom reads a claim; ok is false for an IPAddress that is not one of ours or is
// malformed (its range then cannot be known).
func claimFrom(ip *networkingv1.IPAddress) (claim, bool) {
	_, node, ok := ipclaim.Parent(ip, "nodes")
	if !ipclaim.ManagedBy(ip, ClaimManager) || !ok {
		return claim{}, false
	}
	r, err := netip.ParsePrefix(ip.Annotations[AnnotationClaimRange])
	if err != nil || claimName(r) != ip.Name {
		return claim{}, false
	}
	return claim{name: ip.Name, uid: ip.UID, r: r.Masked(), node: node, nodeUID: types.UID(ip.Labels[LabelClaimNodeUID])}, true
}

// onClaim records a claim seen by the informer. One not backed by a holding of this process
// holds its range on its own; its Node is looked at when this process does not know it, so
// that a claim left by a Node that is gone is released.
func (c *Controller) onClaim(obj any) {
	ip, ok := obj.(*networkingv1.IPAddress)
	if !ok {
		return
	}
	cl, ok := claimFrom(ip)
	if !ok {
		return
	}
	c.mu.Lock()
	c.recordLocked(cl)
	c.mu.Unlock()
	node, err := c.nodes.Get(cl.node)
	if apierrors.IsNotFound(err) || (err == nil && node.UID != cl.nodeUID) {
		c.queue.Add(cl.node)
	}
}

func (c *Controller) onClaimDelete(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	ip, ok := obj.(*networkingv1.IPAddress)
	if !ok {
		return
	}
	c.mu.Lock()
	wake := c.forgetLocked(ip.Name, ip.UID)
	c.mu.Unlock()
	c.requeue(wake)
}

// recordLocked adds or refreshes a known claim and settles its hold.
func (c *Controller) recordLocked(cl claim) {
	if old, ok := c.claims[cl.name]; ok && old != cl {
		c.forgetLocked(old.name, old.uid)
	}
	c.claims[cl.name] = cl
	if c.coveredLocked(cl) || c.ownHold[cl.name] {
		return
	}
	if f := c.familyOf(cl.r); f != nil {
		taken, _ := f.set.Occupy(cl.r)
		c.metrics.allocations.WithLabelValues(f.label).Add(float64(taken))
	}
	c.ownHold[cl.name] = true
	c.observeLocked()
}

// forgetLocked drops the claim name (of that UID, if uid is set) once it is deleted, freeing
// its range if it held it on its own. It returns the waiting Nodes to try again.
func (c *Controller) forgetLocked(name string, uid types.UID) []string {
	cl, ok := c.claims[name]
	if !ok || (uid != "" && cl.uid != "" && cl.uid != uid) {
		return nil
	}
	delete(c.claims, name)
	freed := 0
	if c.ownHold[name] {
		delete(c.ownHold, name)
		freed = c.releaseLocked([]netip.Prefix{cl.r})
		c.observeLocked()
	}
	return c.wakeLocked(freed)
}

// coveredLocked reports whether the claim's range is held by this process's holding for the
// same Node object.
func (c *Controller) coveredLocked(cl claim) bool {
	h, ok := c.held[cl.node]
	return ok && h.uid == cl.nodeUID && slices.Contains(h.ranges, cl.r)
}

// matchingLocked returns the known claim of r for node (name and UID), if any.
func (c *Controller) matchingLocked(node string, uid types.UID, r netip.Prefix) (claim, bool) {
	cl, ok := c.claims[claimName(r)]
	return cl, ok && cl.is(node, uid, r)
}

// occupyLocked makes a holding of node (name, uid) hold r: a claim of the same Node that held
// r on its own hands its hold over; otherwise r is marked used once more. shared reports
// ranges that were held already by someone else.
func (c *Controller) occupyLocked(node string, uid types.UID, r netip.Prefix) (shared bool) {
	if cl, ok := c.matchingLocked(node, uid, r); ok && c.ownHold[cl.name] {
		delete(c.ownHold, cl.name)
		return false
	}
	f := c.familyOf(r)
	if f == nil {
		return false
	}
	taken, sharedSlots := f.set.Occupy(r)
	c.metrics.allocations.WithLabelValues(f.label).Add(float64(taken))
	return sharedSlots > 0
}

// dropLocked lets go of a holding's ranges: a range its Node's claim still names stays held,
// on the claim's account, until the claim is deleted. It returns how many ranges were freed.
func (c *Controller) dropLocked(node string, h holding) (freed int) {
	var release []netip.Prefix
	for _, r := range h.ranges {
		if cl, ok := c.matchingLocked(node, h.uid, r); ok {
			c.ownHold[cl.name] = true
			continue
		}
		release = append(release, r)
	}
	return c.releaseLocked(release)
}

// claimRanges makes sure every range reserved for node is claimed for it. A range someone
// else claimed first is given up (it stays held on that claim's account) and errTaken is
// returned: the caller reserves again.
func (c *Controller) claimRanges(ctx context.Context, node *v1.Node, ranges []netip.Prefix) error {
	logger := klog.FromContext(ctx)
	for _, r := range ranges {
		c.mu.Lock()
		_, mine := c.matchingLocked(node.Name, node.UID, r)
		c.mu.Unlock()
		if mine {
			continue
		}
		// An AlreadyExists may be this Node's own claim: an earlier try whose answer was
		// lost, or another allocator working on the same Node.
		res, err := ipclaim.Claim(ctx, c.client.NetworkingV1().IPAddresses(), newClaimObject(r, node), func(live *networkingv1.IPAddress) bool {
			cl, ours := claimFrom(live)
			return ours && cl.is(node.Name, node.UID, r)
		})
		var readErr *ipclaim.ReadError
		switch {
		case errors.Is(err, ipclaim.ErrVanished):
			return errTaken // released meanwhile: reserve again, it may be free
		case errors.As(err, &readErr):
			return fmt.Errorf("reading the claim of %s: %w", r, readErr.Err)
		case err != nil:
			return fmt.Errorf("claiming %s for Node %s: %w", r, node.Name, err)
		}
		cl, ours := claimFrom(res.Object)
		if !res.Taken {
			c.mu.Lock()
			c.recordLocked(cl)
			c.mu.Unlock()
			continue
		}
		live := res.Object
		if !ours {
			// An IPAddress of another owner with this name: hold the range for as long as this
			// process runs. It has no Node to verify, so it is never released here.
			cl = claim{name: live.Name, uid: live.UID, r: r}
		}
		logger.V(2).Info("Range claimed by someone else, taking another", "node", klog.KObj(node), "range", r, "claimedFor", cl.node)
		c.mu.Lock()
		c.claims[cl.name] = cl
		// The reservation's hold of r passes to the claim: r stays used.
		if h := c.held[node.Name]; h.uid == node.UID {
			h.ranges = slices.DeleteFunc(slices.Clone(h.ranges), func(p netip.Prefix) bool { return p == r })
			c.held[node.Name] = h
			c.ownHold[cl.name] = true
		}
		c.metrics.claimCollisions.Inc()
		c.mu.Unlock()
		return errTaken
	}
	return nil
}

// errTaken: a reserved range was claimed by someone else first.
var errTaken = fmt.Errorf("range claimed by someone else")

// collectClaims deletes the claims made for the Node name that can no longer be written to
// it: the Node is gone or is another object (checked by a live read when this process's
// cache is the only witness), or it has other ranges (immutable once set).
func (c *Controller) collectClaims(ctx context.Context, name string, node *v1.Node) error {
	c.mu.Lock()
	// Those only a live read can judge come first, so that a failed read deletes nothing.
	var suspect, stale []claim
	for _, cl := range c.claims {
		if cl.node != name || cl.node == "" {
			continue
		}
		switch {
		case node == nil || node.UID != cl.nodeUID:
			suspect = append(suspect, cl)
		case len(podCIDRs(node)) > 0 && !slices.Contains(parseRanges(klog.FromContext(ctx), node), cl.r):
			stale = append(stale, cl)
		}
	}
	c.mu.Unlock()
	var live *v1.Node // read once, for the first suspect
	liveGone := false
	nodeGone := func(ctx context.Context, cl claim) (string, bool, error) {
		if !slices.Contains(suspect, cl) {
			return "its Node has other ranges", true, nil
		}
		if live == nil && !liveGone {
			n, err := c.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				liveGone = true
			case err != nil:
				return "", false, fmt.Errorf("verifying Node %s is gone before releasing its claims: %w", name, err)
			default:
				live = n
			}
		}
		if liveGone || live.UID != cl.nodeUID {
			return "its Node is gone", true, nil
		}
		return "", false, nil
	}
	released := func(cl claim, _ string, o ipclaim.Outcome, err error) error {
		switch o {
		case ipclaim.Deleted, ipclaim.AlreadyGone:
			klog.FromContext(ctx).V(2).Info("Released the claim of a range its Node cannot get", "node", name, "range", cl.r)
			c.mu.Lock()
			wake := c.forgetLocked(cl.name, cl.uid)
			c.mu.Unlock()
			c.requeue(wake)
		case ipclaim.Replaced:
			// Replaced by a new claim meanwhile: the informer brings it.
		default:
			return fmt.Errorf("releasing the claim of %s for Node %s: %w", cl.r, name, err)
		}
		return nil
	}
	return ipclaim.Sweep(ctx, c.client.NetworkingV1().IPAddresses(), append(suspect, stale...),
		func(cl claim) (string, types.UID) { return cl.name, cl.uid }, nodeGone, released)
}
