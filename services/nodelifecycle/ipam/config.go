package ipam

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/kcm-split/kcm-split/services/nodelifecycle/cidrset"
	"github.com/kcm-split/kcm-split/shared/app"
)

// Flag names, upstream's.
const (
	FlagAllocateNodeCIDRs     = "allocate-node-cidrs"
	FlagClusterCIDR           = "cluster-cidr"
	FlagNodeCIDRMaskSize      = "node-cidr-mask-size"
	FlagNodeCIDRMaskSizeIPv4  = "node-cidr-mask-size-ipv4"
	FlagNodeCIDRMaskSizeIPv6  = "node-cidr-mask-size-ipv6"
	FlagServiceClusterIPRange = "service-cluster-ip-range"
	// FlagCIDRFreeRangesWarning is kcm-split's: upstream has no warning before exhaustion.
	FlagCIDRFreeRangesWarning = "node-cidr-free-ranges-warning"
)

// DefaultFreeRangesWarning is the default of --node-cidr-free-ranges-warning: room for a
// few more Nodes, enough notice for a cluster that adds Nodes one by one to widen its
// cluster CIDR or trim Nodes before a new one waits. An Event only adds information, so the
// warning is on by default.
const DefaultFreeRangesWarning = 10

// Default node mask sizes, upstream's.
const (
	DefaultMaskSizeIPv4 = 24
	DefaultMaskSizeIPv6 = 64
)

// Options are the flags as given. Mask sizes of 0 mean "not set", as upstream's.
type Options struct {
	Allocate     bool
	ClusterCIDR  string
	MaskSize     int
	MaskSizeIPv4 int
	MaskSizeIPv6 int
	ServiceCIDR  string
	// FreeRangesWarning: one Warning Event when fewer ranges than this are free in a
	// cluster CIDR; 0 turns it off.
	FreeRangesWarning int
}

// Range is one cluster CIDR and the size of the ranges cut from it.
type Range struct {
	Cluster  netip.Prefix
	MaskSize int
}

// Config is what the allocator runs with: one Range per family, in the order given (the
// first is a Node's primary spec.podCIDR), and the Service ranges to keep out.
type Config struct {
	Ranges  []Range
	Service []netip.Prefix
	// FreeRangesWarning is Options.FreeRangesWarning.
	FreeRangesWarning int
}

// Config checks the options as upstream's kube-controller-manager does, and more: values it
// ignores or only logs (an unparsable Service range, Service ranges leaving no Pod range) are
// errors here. Every error is an *app.FlagError naming the flag. Values given are checked
// even with allocation off (upstream ignores them then); the Config is used only with it on.
func (o Options) Config() (Config, error) {
	bad := func(flag, format string, args ...any) error {
		return &app.FlagError{Flag: flag, Err: fmt.Errorf(format, args...)}
	}
	for flag, v := range map[string]int{FlagNodeCIDRMaskSize: o.MaskSize, FlagNodeCIDRMaskSizeIPv4: o.MaskSizeIPv4, FlagNodeCIDRMaskSizeIPv6: o.MaskSizeIPv6, FlagCIDRFreeRangesWarning: o.FreeRangesWarning} {
		if v < 0 {
			return Config{}, bad(flag, "%d is negative", v)
		}
	}
	clusters, err := parseDualStack(FlagClusterCIDR, o.ClusterCIDR)
	if err != nil {
		return Config{}, err
	}
	services, err := parseDualStack(FlagServiceClusterIPRange, o.ServiceCIDR)
	if err != nil {
		return Config{}, err
	}
	if len(clusters) == 0 {
		if o.Allocate {
			return Config{}, bad(FlagClusterCIDR, "is required with --%s", FlagAllocateNodeCIDRs)
		}
		return Config{}, nil
	}

	// Mask sizes, upstream's rules: the family-less flag for a single-stack cluster only, and
	// never together with the per-family ones; a family's flag only for that family.
	dual := len(clusters) == 2
	single6 := !dual && clusters[0].Addr().Is6()
	switch {
	case dual && o.MaskSize != 0:
		return Config{}, bad(FlagNodeCIDRMaskSize, "is not allowed with a dual-stack --%s; use --%s and --%s", FlagClusterCIDR, FlagNodeCIDRMaskSizeIPv4, FlagNodeCIDRMaskSizeIPv6)
	case o.MaskSize != 0 && (o.MaskSizeIPv4 != 0 || o.MaskSizeIPv6 != 0):
		return Config{}, bad(FlagNodeCIDRMaskSize, "is not allowed together with --%s or --%s", FlagNodeCIDRMaskSizeIPv4, FlagNodeCIDRMaskSizeIPv6)
	case !dual && single6 && o.MaskSizeIPv4 != 0:
		return Config{}, bad(FlagNodeCIDRMaskSizeIPv4, "is not allowed for a single-stack IPv6 --%s", FlagClusterCIDR)
	case !dual && !single6 && o.MaskSizeIPv6 != 0:
		return Config{}, bad(FlagNodeCIDRMaskSizeIPv6, "is not allowed for a single-stack IPv4 --%s", FlagClusterCIDR)
	}

	var cfg Config
	for _, cluster := range clusters {
		mask, flag := o.MaskSizeIPv4, FlagNodeCIDRMaskSizeIPv4
		def := DefaultMaskSizeIPv4
		if cluster.Addr().Is6() {
			mask, flag, def = o.MaskSizeIPv6, FlagNodeCIDRMaskSizeIPv6, DefaultMaskSizeIPv6
		}
		if !dual && o.MaskSize != 0 {
			mask, flag = o.MaskSize, FlagNodeCIDRMaskSize
		}
		if mask == 0 {
			mask = def
			if !dual {
				flag = FlagNodeCIDRMaskSize
			}
		}
		// cidrset.New is the single judge of what sizes work.
		set, err := cidrset.New(cluster, mask)
		if err != nil {
			return Config{}, bad(flag, "%v", err)
		}
		// The Service ranges must leave some range free.
		for _, svc := range services {
			set.Occupy(svc)
		}
		if set.Used() == set.Size() {
			return Config{}, bad(FlagServiceClusterIPRange, "%v leaves no /%d range of --%s %s for Pods", services, mask, FlagClusterCIDR, set.Cluster())
		}
		cfg.Ranges = append(cfg.Ranges, Range{Cluster: cluster, MaskSize: mask})
	}
	cfg.Service = services
	cfg.FreeRangesWarning = o.FreeRangesWarning
	return cfg, nil
}

// parseDualStack parses "" (none), one CIDR, or an IPv4,IPv6 pair in either order.
func parseDualStack(flag, value string) ([]netip.Prefix, error) {
	bad := func(format string, args ...any) error {
		return &app.FlagError{Flag: flag, Err: fmt.Errorf(format, args...)}
	}
	if strings.TrimSpace(value) == "" {
		return nil, nil
	}
	parts := strings.Split(value, ",")
	if len(parts) > 2 {
		return nil, bad("%q has %d CIDRs; at most two, one IPv4 and one IPv6", value, len(parts))
	}
	var out []netip.Prefix
	for _, s := range parts {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			return nil, bad("%q is not a CIDR (like 10.244.0.0/16 or fd00:10:244::/56)", strings.TrimSpace(s))
		}
		if p.Addr().Is4In6() || p.Addr().Zone() != "" {
			return nil, bad("%s: give IPv4 ranges in IPv4 form, IPv6 ones without a zone", p)
		}
		out = append(out, p.Masked())
	}
	if len(out) == 2 && out[0].Addr().Is4() == out[1].Addr().Is4() {
		return nil, bad("%s and %s are of one family; a dual-stack value is one IPv4 and one IPv6 CIDR", out[0], out[1])
	}
	return out, nil
}
