// Why a Service waits for an address: one reason per waiting Service, for the pending gauge's
// reason label (and the Service's condition).

package allocation

// Reasons a LoadBalancer Service waits for an address.
const (
	// WaitPoolAPIUnavailable: an enabled pool API is not served or its cache not synced;
	// nothing is handed out until it is (and nothing is taken away).
	WaitPoolAPIUnavailable = "PoolAPIUnavailable"
	// WaitInvalidRequest: the Service's annotations or spec.loadBalancerIP cannot be met as
	// written.
	WaitInvalidRequest = "InvalidRequest"
	// WaitNoMatchingPool: no pool may serve the Service (the pool it names does not exist,
	// is invalid or does not admit it; no pool admits it automatically).
	WaitNoMatchingPool = "NoMatchingPool"
	// WaitRequestedIPNotInPool: the address it asks for is in no pool it may use.
	WaitRequestedIPNotInPool = "RequestedIPNotInPool"
	// WaitSharingConflict: the address it asks for is held by a Service it may not share
	// with (sharing key, ports, traffic policy).
	WaitSharingConflict = "SharingConflict"
	// WaitPoolExhausted: the pools it may use have no free address it may take.
	WaitPoolExhausted = "PoolExhausted"
)

// PendingLabels are the labels of kcm_split_servicelb_pending_services for one Service.
type PendingLabels struct {
	API, Pool, Reason string
}

// firstReason keeps the first reason given: the one closest to the cause.
func firstReason(cur *string, reason string) {
	if *cur == "" {
		*cur = reason
	}
}
