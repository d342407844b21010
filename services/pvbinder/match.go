package pvbinder

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	storagehelpers "k8s.io/component-helpers/storage/volume"
	"k8s.io/utils/ptr"
)

// Annotations that k8s.io/component-helpers/storage/volume does not define (the rest are
// used from there): no shared library serves the default-class and resize keys.
const (
	AnnDefaultClass      = "storageclass.kubernetes.io/is-default-class"
	AnnBetaDefaultClass  = "storageclass.beta.kubernetes.io/is-default-class"
	AnnPreResizeCapacity = "volume.alpha.kubernetes.io/pre-resize-capacity"
)

// No library serves this: component-helpers has no storage-quantity accessor.
//
// requestedStorage is the storage a claim asks for.
func requestedStorage(claim *v1.PersistentVolumeClaim) resource.Quantity {
	return claim.Spec.Resources.Requests[v1.ResourceStorage]
}

func capacityOf(pv *v1.PersistentVolume) resource.Quantity {
	return pv.Spec.Capacity[v1.ResourceStorage]
}

// No library serves this: component-helpers has no whole-claim check (upstream's is its controller's).
//
// checkSatisfies says why pv cannot serve claim, or nil. It is the check for a claim that
// names its volume (spec.volumeName); the messages are upstream's, shown in VolumeMismatch
// events.
func checkSatisfies(pv *v1.PersistentVolume, claim *v1.PersistentVolumeClaim) error {
	if pv.DeletionTimestamp != nil {
		return fmt.Errorf("the volume is marked for deletion %q", pv.Name)
	}
	want, have := requestedStorage(claim), capacityOf(pv)
	if have.Value() < want.Value() {
		return fmt.Errorf("requested PV is too small")
	}
	if storagehelpers.GetPersistentVolumeClass(pv) != storagehelpers.GetPersistentVolumeClaimClass(claim) {
		return fmt.Errorf("storageClassName does not match")
	}
	if ptr.Deref(claim.Spec.VolumeAttributesClassName, "") != ptr.Deref(pv.Spec.VolumeAttributesClassName, "") {
		return fmt.Errorf("volumeAttributesClassName does not match")
	}
	if storagehelpers.CheckVolumeModeMismatches(&claim.Spec, &pv.Spec) {
		return fmt.Errorf("incompatible volumeMode")
	}
	if !storagehelpers.CheckAccessModes(claim, pv) {
		return fmt.Errorf("incompatible accessMode")
	}
	return nil
}

// No library serves this: upstream's access-mode string helper is in k8s.io/kubernetes itself.
//
// modeSetKey names a PV's set of access modes independently of order and repetition.
func modeSetKey(modes []v1.PersistentVolumeAccessMode) string {
	s := make([]string, 0, len(modes))
	for _, m := range modes {
		s = append(s, string(m))
	}
	slices.Sort(s)
	return strings.Join(slices.Compact(s), ",")
}

// findBestMatch picks the PV for an unbound claim that names no volume. Which PVs fit, and
// the smallest-fits choice, are the library's FindMatchingVolume, as upstream; around it:
//
//   - Only PVs offering every access mode the claim asks for are considered (the library
//     leaves access modes to its caller outside the scheduler).
//   - A PV whose claimRef already names the claim wins (pre-bound by a user, by the
//     scheduler, or half-bound by a binder that crashed), provided its size, volume mode and
//     attributes class fit and it is not being deleted. Upstream checks this per access-mode
//     group and may pick a plain PV of a narrower group instead; checking every group first
//     means a half-finished bind is always completed, never abandoned for another PV.
//   - Otherwise PVs are grouped by their set of access modes, and the groups are tried from
//     the fewest modes up, so a claim does not take a more capable PV while a plainer one
//     fits. In a group the library takes the smallest Available, unclaimed PV of the claim's
//     class, volume mode and attributes class that holds the request and matches the claim's
//     selector; the group is sorted by name, so equal sizes go to the lowest name.
//   - delayBinding (WaitForFirstConsumer) claims only take pre-bound PVs: the scheduler
//     chooses their PVs once it knows the node.
//
// skip excludes PVs already promised to another claim by a bind in flight; it does not apply
// to a PV pre-bound to this claim.
func findBestMatch(claim *v1.PersistentVolumeClaim, pvs []*v1.PersistentVolume, delayBinding bool, skip func(*v1.PersistentVolume) bool) (*v1.PersistentVolume, error) {
	candidates := make([]*v1.PersistentVolume, 0, len(pvs))
	for _, pv := range pvs {
		if storagehelpers.CheckAccessModes(claim, pv) {
			candidates = append(candidates, pv)
		}
	}
	// With delayBinding set, the library returns only a PV pre-bound to the claim.
	pv, err := storagehelpers.FindMatchingVolume(claim, candidates, nil, nil, true, vacEnabled)
	if err != nil || pv != nil || delayBinding {
		return pv, err
	}

	slices.SortFunc(candidates, func(a, b *v1.PersistentVolume) int { return cmp.Compare(a.Name, b.Name) })
	groups := map[string][]*v1.PersistentVolume{}
	for _, pv := range candidates {
		if skip != nil && skip(pv) {
			continue
		}
		key := modeSetKey(pv.Spec.AccessModes)
		groups[key] = append(groups[key], pv)
	}
	keys := make([]string, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		return cmp.Or(cmp.Compare(strings.Count(a, ","), strings.Count(b, ",")), cmp.Compare(a, b))
	})
	for _, k := range keys {
		pv, err := storagehelpers.FindMatchingVolume(claim, groups[k], nil, nil, false, vacEnabled)
		if err != nil || pv != nil {
			return pv, err
		}
	}
	return nil, nil
}

// vacEnabled is the VolumeAttributesClass feature, GA and on by default since 1.34: the
// attributes class of claim and PV must match.
const vacEnabled = true

// No library serves this: FindMatchingVolume takes only Available PVs, this also considers PVs about to become Available.
//
// couldServe is a cheap test of whether an Available, unclaimed pv might be chosen for
// claim; it decides which waiting claim a new PV wakes. Waking a claim that then picks
// another PV costs one sync and no API call.
func couldServe(pv *v1.PersistentVolume, claim *v1.PersistentVolumeClaim) bool {
	if storagehelpers.GetPersistentVolumeClass(pv) != storagehelpers.GetPersistentVolumeClaimClass(claim) ||
		!storagehelpers.CheckAccessModes(claim, pv) || storagehelpers.CheckVolumeModeMismatches(&claim.Spec, &pv.Spec) {
		return false
	}
	want, have := requestedStorage(claim), capacityOf(pv)
	if have.Cmp(want) < 0 {
		return false
	}
	if claim.Spec.Selector != nil {
		s, err := metav1.LabelSelectorAsSelector(claim.Spec.Selector)
		if err != nil || !s.Matches(labels.Set(pv.Labels)) {
			return false
		}
	}
	return true
}

// No library serves this: it is this controller's own wake-up rule.
//
// becomingAvailable reports whether pv is new and unclaimed: the volume loop is about to make it
// Available.
func becomingAvailable(pv *v1.PersistentVolume) bool {
	return pv.Spec.ClaimRef == nil && pv.DeletionTimestamp == nil &&
		(pv.Status.Phase == v1.VolumePending || pv.Status.Phase == "")
}

// No library serves this: upstream's default-class lookup is in k8s.io/kubernetes itself.
//
// defaultClass returns the default StorageClass: of those annotated as default, the newest,
// and of equally new ones the first by name (upstream's rule when an admin leaves two
// defaults for a while during a switch). Nil when there is none.
func defaultClass(classes []*storagev1.StorageClass) *storagev1.StorageClass {
	var best *storagev1.StorageClass
	for _, c := range classes {
		if c.Annotations[AnnDefaultClass] != "true" && c.Annotations[AnnBetaDefaultClass] != "true" {
			continue
		}
		if best == nil || c.CreationTimestamp.After(best.CreationTimestamp.Time) ||
			(c.CreationTimestamp.Equal(&best.CreationTimestamp) && c.Name < best.Name) {
			best = c
		}
	}
	return best
}

// claimKey is the queue key of a claim.
func claimKey(namespace, name string) string { return namespace + "/" + name }

// refKey is the queue key of the claim a claimRef names.
func refKey(ref *v1.ObjectReference) string { return claimKey(ref.Namespace, ref.Name) }
