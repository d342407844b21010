// Package cachedslices holds what the EndpointSlice and mirroring controllers both do with
// the EndpointSlices their informer cache lists before reconciling them: leave out those
// being deleted, and refuse a cache older than their own writes (ErrStale). Both reconcile
// against k8s.io/endpointslice's EndpointSliceTracker, so both need the same two guards.
package cachedslices

import (
	"errors"

	discovery "k8s.io/api/discovery/v1"
)

// ErrStale is returned while the informer still holds EndpointSlices older than the
// controller's own last writes: syncing from them would undo those writes. The sync is
// retried once the cache has caught up.
var ErrStale = errors.New("EndpointSlice informer cache is out of date")

// WithoutDeleted returns the slices not being deleted, in a new list. A slice being deleted
// is gone for reconciling; counting it would block its Service until the deletion completes.
func WithoutDeleted(slices []*discovery.EndpointSlice) []*discovery.EndpointSlice {
	out := slices[:0:0]
	for _, s := range slices {
		if s.DeletionTimestamp == nil {
			out = append(out, s)
		}
	}
	return out
}
