package ipam

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/kcm-split/kcm-split/shared/app"
)

func TestConfigAccepts(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
		want string // the ranges as "cluster/mask" joined by spaces, then "| services"
	}{
		{"allocation off, nothing given", Options{}, "|"},
		{"IPv4, default mask", Options{Allocate: true, ClusterCIDR: "10.244.0.0/16"}, "10.244.0.0/16:24 |"},
		{"IPv6, default mask", Options{Allocate: true, ClusterCIDR: "fd00:10:244::/56"}, "fd00:10:244::/56:64 |"},
		{"not canonical: masked", Options{Allocate: true, ClusterCIDR: " 10.244.1.2/16 "}, "10.244.0.0/16:24 |"},
		{"single-stack mask", Options{Allocate: true, ClusterCIDR: "10.0.0.0/8", MaskSize: 20}, "10.0.0.0/8:20 |"},
		{"single-stack IPv4 with the IPv4 flag", Options{Allocate: true, ClusterCIDR: "10.0.0.0/8", MaskSizeIPv4: 26}, "10.0.0.0/8:26 |"},
		{"single-stack IPv6 with the IPv6 flag", Options{Allocate: true, ClusterCIDR: "fd00::/48", MaskSizeIPv6: 60}, "fd00::/48:60 |"},
		{"dual-stack, IPv6 first, per-family masks", Options{Allocate: true, ClusterCIDR: "fd00::/48,10.0.0.0/16", MaskSizeIPv4: 28, MaskSizeIPv6: 56},
			"fd00::/48:56 10.0.0.0/16:28 |"},
		{"dual-stack defaults", Options{Allocate: true, ClusterCIDR: "10.0.0.0/16,fd00::/48"}, "10.0.0.0/16:24 fd00::/48:64 |"},
		{"mask equal to the cluster prefix", Options{Allocate: true, ClusterCIDR: "192.0.2.0/24", MaskSize: 24}, "192.0.2.0/24:24 |"},
		{"service ranges", Options{Allocate: true, ClusterCIDR: "10.0.0.0/16", ServiceCIDR: "10.0.5.0/24,fd00:96::/112"},
			"10.0.0.0/16:24 | 10.0.5.0/24 fd00:96::/112"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := tc.opts.Config()
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range cfg.Ranges {
				got = append(got, fmt.Sprintf("%s:%d", r.Cluster, r.MaskSize))
			}
			got = append(got, "|")
			for _, s := range cfg.Service {
				got = append(got, s.String())
			}
			if strings.Join(got, " ") != tc.want {
				t.Errorf("got %q, want %q", strings.Join(got, " "), tc.want)
			}
		})
	}
}

func TestConfigRefuses(t *testing.T) {
	for _, tc := range []struct {
		name     string
		opts     Options
		wantFlag string
		wantMsg  string
	}{
		{"allocation without a cluster CIDR", Options{Allocate: true}, FlagClusterCIDR, "is required with --allocate-node-cidrs"},
		{"mask shorter than the cluster prefix", Options{Allocate: true, ClusterCIDR: "10.0.0.0/16", MaskSize: 15}, FlagNodeCIDRMaskSize, "larger than the cluster CIDR"},
		{"default mask shorter than the cluster prefix", Options{Allocate: true, ClusterCIDR: "10.0.0.0/25"}, FlagNodeCIDRMaskSize, "/24 is larger"},
		{"IPv6 mask shorter in dual-stack", Options{Allocate: true, ClusterCIDR: "10.0.0.0/16,fd00::/64", MaskSizeIPv6: 60}, FlagNodeCIDRMaskSizeIPv6, "larger"},
		{"mask longer than the address", Options{Allocate: true, ClusterCIDR: "10.0.0.0/16", MaskSize: 33}, FlagNodeCIDRMaskSize, "longer than an IPv4 address"},
		{"too many ranges", Options{Allocate: true, ClusterCIDR: "fd00::/32"}, FlagNodeCIDRMaskSize, "2^32 ranges"},
		{"three CIDRs", Options{Allocate: true, ClusterCIDR: "10.0.0.0/16,fd00::/48,10.1.0.0/16"}, FlagClusterCIDR, "at most two"},
		{"two IPv4", Options{Allocate: true, ClusterCIDR: "10.0.0.0/16,10.1.0.0/16"}, FlagClusterCIDR, "of one family"},
		{"two IPv6", Options{Allocate: true, ClusterCIDR: "fd00::/48,fd01::/48"}, FlagClusterCIDR, "of one family"},
		{"not a CIDR", Options{Allocate: true, ClusterCIDR: "10.0.0.0"}, FlagClusterCIDR, "is not a CIDR"},
		{"empty entry", Options{Allocate: true, ClusterCIDR: "10.0.0.0/16,"}, FlagClusterCIDR, "is not a CIDR"},
		{"IPv4-mapped", Options{Allocate: true, ClusterCIDR: "::ffff:10.0.0.0/104"}, FlagClusterCIDR, "IPv4 form"},
		{"bad syntax even with allocation off", Options{ClusterCIDR: "banana"}, FlagClusterCIDR, "is not a CIDR"},
		{"family-less mask with dual-stack", Options{Allocate: true, ClusterCIDR: "10.0.0.0/16,fd00::/48", MaskSize: 24}, FlagNodeCIDRMaskSize, "dual-stack"},
		{"family-less mask with a family mask", Options{Allocate: true, ClusterCIDR: "10.0.0.0/16", MaskSize: 24, MaskSizeIPv4: 24}, FlagNodeCIDRMaskSize, "not allowed together"},
		{"IPv4 mask for an IPv6 cluster", Options{Allocate: true, ClusterCIDR: "fd00::/48", MaskSizeIPv4: 24}, FlagNodeCIDRMaskSizeIPv4, "single-stack IPv6"},
		{"IPv6 mask for an IPv4 cluster", Options{Allocate: true, ClusterCIDR: "10.0.0.0/16", MaskSizeIPv6: 64}, FlagNodeCIDRMaskSizeIPv6, "single-stack IPv4"},
		{"negative mask", Options{Allocate: true, ClusterCIDR: "10.0.0.0/16", MaskSizeIPv4: -1}, FlagNodeCIDRMaskSizeIPv4, "negative"},
		{"service range not a CIDR", Options{Allocate: true, ClusterCIDR: "10.0.0.0/16", ServiceCIDR: "10.96.0.0"}, FlagServiceClusterIPRange, "is not a CIDR"},
		{"three service ranges", Options{Allocate: true, ClusterCIDR: "10.0.0.0/16", ServiceCIDR: "10.96.0.0/12,fd00::/108,10.97.0.0/16"}, FlagServiceClusterIPRange, "at most two"},
		{"two IPv4 service ranges", Options{Allocate: true, ClusterCIDR: "10.0.0.0/16", ServiceCIDR: "10.96.0.0/16,10.97.0.0/16"}, FlagServiceClusterIPRange, "of one family"},
		{"service range covering the cluster", Options{Allocate: true, ClusterCIDR: "10.0.0.0/16", ServiceCIDR: "10.0.0.0/12"}, FlagServiceClusterIPRange, "leaves no /24 range"},
		{"service range inside the only range", Options{Allocate: true, ClusterCIDR: "192.0.2.0/24", MaskSize: 24, ServiceCIDR: "192.0.2.0/25"}, FlagServiceClusterIPRange, "leaves no /24 range"},
		{"service ranges filling every IPv6 range", Options{Allocate: true, ClusterCIDR: "10.0.0.0/16,fd00::/63", MaskSizeIPv6: 64, ServiceCIDR: "10.96.0.0/12,fd00::/63"}, FlagServiceClusterIPRange, "fd00::/63"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.opts.Config()
			var fe *app.FlagError
			if !errors.As(err, &fe) || fe.Flag != tc.wantFlag || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Fatalf("Config() = %v, want an error for --%s with %q", err, tc.wantFlag, tc.wantMsg)
			}
		})
	}
}
