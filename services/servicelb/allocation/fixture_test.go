package allocation

import (
	"net/netip"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mlb "go.universe.tf/metallb/api/v1beta1"

	v1 "k8s.io/api/core/v1"

	"github.com/kcm-split/kcm-split/services/servicelb/api/v1alpha1"
	"github.com/kcm-split/kcm-split/services/servicelb/internal/testobj"
	"github.com/kcm-split/kcm-split/services/servicelb/poolsource"
)

// stateWith is an allocation state over pools parsed from name -> address ranges; a pool
// whose ranges start with "!" is invalid.
func stateWith(t *testing.T, pools map[string][]string) *State {
	t.Helper()
	s := New()
	var objs []*v1alpha1.IPAddressPool
	for name, addrs := range pools {
		p := &v1alpha1.IPAddressPool{}
		p.Name = name
		p.Spec.Addresses = addrs
		objs = append(objs, p)
	}
	s.SetPools(parseKCMSplit(objs))
	return s
}

// held is an address a Service holds before a decision, and the pool it was last seen in.
type held struct {
	addr, origin string
}

// stateHolding is stateWith where key already holds addrs.
func stateHolding(t *testing.T, pools map[string][]string, svc *v1.Service, addrs ...held) *State {
	t.Helper()
	s := stateWith(t, pools)
	key := svc.Namespace + "/" + svc.Name
	for _, h := range addrs {
		a := netip.MustParseAddr(h.addr)
		if err := s.alloc.Claim(key, a, PropsOf(svc)); err != nil {
			t.Fatal(err)
		}
		if h.origin != "" {
			s.origin[a] = h.origin
		}
	}
	return s
}

// metalState is an allocation state reading MetalLB pools only.
func metalState(t *testing.T, pools ...*mlb.IPAddressPool) *State {
	t.Helper()
	s := New(poolsource.MetalLB)
	var parsed []poolsource.Parsed
	for _, p := range pools {
		parsed = append(parsed, poolsource.Parsed{Created: p.CreationTimestamp, Pool: poolsource.ParseMetalLB(p)})
	}
	parsedPools := poolsource.CheckOverlaps(parsed)
	for _, pi := range parsedPools {
		if !pi.Valid {
			t.Fatalf("pool %s invalid: %s", pi.Key, pi.Message)
		}
	}
	s.SetPools(parsedPools)
	return s
}

func metal(name string, sa *mlb.ServiceAllocation, addrs ...string) *mlb.IPAddressPool {
	return &mlb.IPAddressPool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: mlb.IPAddressPoolSpec{Addresses: addrs, AllocateTo: sa}}
}

// parseKCMSplit parses kcm-split pools and checks them for overlaps.
func parseKCMSplit(objs []*v1alpha1.IPAddressPool) map[string]*poolsource.Pool {
	var parsed []poolsource.Parsed
	for _, o := range objs {
		parsed = append(parsed, poolsource.Parsed{Created: o.CreationTimestamp, Pool: poolsource.ParseKCMSplit(o)})
	}
	return poolsource.CheckOverlaps(parsed)
}

const testNS = testobj.Namespace

type svcOpt = testobj.Opt

var lb, withAnnotation = testobj.LB, testobj.WithAnnotation
