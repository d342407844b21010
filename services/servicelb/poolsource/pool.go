package poolsource

import (
	"cmp"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kcm-split/kcm-split/services/servicelb/addrpool"
	"github.com/kcm-split/kcm-split/services/servicelb/api/v1alpha1"
)

// Pool is an address pool of any API, parsed and checked: what allocation works from.
type Pool struct {
	// Key names the pool here (API.Key of its object name); API is its API's name.
	Key, API string
	// Addresses are its ranges; an invalid pool's may be incomplete.
	Addresses  addrpool.Pool
	AutoAssign bool
	// Group, then Priority (lower first), then Key order the pools of one API a Service
	// gets an address from automatically.
	Group    int
	Priority int32
	// admit says whether a Service in a namespace with the given labels may use the pool.
	admit func(svc *v1.Service, nsLabels labels.Set) bool
	// Valid is false when the spec cannot be used; Reason and Message say why, for the
	// pool's status. An invalid pool hands out nothing.
	Valid           bool
	Reason, Message string
}

// Parsed is one pool with its creation time, which CheckOverlaps orders by.
type Parsed struct {
	Created metav1.Time
	Pool    *Pool
}

// Admits reports whether svc, in a namespace with nsLabels, may use the pool at all.
func (p *Pool) Admits(svc *v1.Service, nsLabels labels.Set) bool {
	return p.Valid && (p.admit == nil || p.admit(svc, nsLabels))
}

// Describe names the pool for messages: its key (MetalLB's carry "metallb.io/").
func (p *Pool) Describe() string {
	if p == nil {
		return ""
	}
	return p.Key
}

// newPool is a valid pool of api named name, to be filled in by its parser.
func newPool(api API, name string, avoidBuggyIPs bool) *Pool {
	return &Pool{
		Key:        api.Key(name),
		API:        api.Name,
		Addresses:  addrpool.Pool{Name: api.Key(name), AvoidBuggyIPs: avoidBuggyIPs},
		AutoAssign: true,
		Valid:      true,
		Reason:     v1alpha1.ReasonValid,
		Message:    "the pool is in use",
	}
}

// invalid marks p unusable, for reason and the message format and args make.
func (p *Pool) invalid(reason, format string, args ...any) *Pool {
	p.Valid, p.Reason, p.Message = false, reason, fmt.Sprintf(format, args...)
	return p
}

// parseAddresses parses spec.addresses into p; it reports false (p then invalid, with
// reason) when they are empty, unparsable or overlap each other.
func (p *Pool) parseAddresses(addrs []string, reason string) bool {
	if len(addrs) == 0 {
		p.invalid(reason, "spec.addresses is empty")
		return false
	}
	for _, s := range addrs {
		r, err := addrpool.ParseRange(s)
		if err != nil {
			p.invalid(reason, "spec.addresses: %v", err)
			return false
		}
		p.Addresses.Ranges = append(p.Addresses.Ranges, r)
	}
	if a, b, ok := addrpool.RangesOverlap(p.Addresses.Ranges); ok {
		p.invalid(reason, "spec.addresses: %s and %s overlap", a, b)
		return false
	}
	return true
}

// CheckOverlaps keys the pools and marks invalid the younger of two pools sharing an
// address, whatever API each comes from: creating a pool never takes addresses away from
// Services that already hold them.
func CheckOverlaps(parsed []Parsed) map[string]*Pool {
	parsed = slices.Clone(parsed)
	slices.SortFunc(parsed, func(a, b Parsed) int {
		if c := a.Created.Compare(b.Created.Time); c != 0 {
			return c
		}
		return cmp.Compare(a.Pool.Key, b.Pool.Key)
	})
	out := make(map[string]*Pool, len(parsed))
	var valid []addrpool.Pool
	for _, p := range parsed {
		out[p.Pool.Key] = p.Pool
		if p.Pool.Valid {
			valid = append(valid, p.Pool.Addresses)
		}
	}
	for name, other := range addrpool.Overlaps(valid) {
		p := out[name]
		p.Valid, p.Reason = false, v1alpha1.ReasonOverlapping
		p.Message = fmt.Sprintf("addresses overlap with the older pool %s; this pool is not used until the overlap is removed", out[other].Describe())
	}
	return out
}
