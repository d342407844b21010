// Package legacyip parses IP addresses as the API server's legacy validation accepts them in
// Endpoints. The Endpoints controller reads Pod IPs with it, the mirroring controller the
// addresses of custom Endpoints; both write the canonical form it returns, so one address
// is spelled one way in Endpoints and in EndpointSlices.
//
// Hand-written because net/netip rejects IPv4 octets with leading zeros, which the API
// server has always accepted (upstream parses them with k8s.io/utils/net's sloppy parser,
// which this module does not otherwise need).
package legacyip

import (
	"net/netip"
	"strconv"
	"strings"
)

// Parse parses s as an IP address: IPv4 octets may carry leading zeros (read as decimal, as
// Go's net.ParseIP did before Go 1.17), an IPv4-mapped IPv6 address counts as IPv4, and a
// zone is refused. Re-printing the result gives the canonical form.
func Parse(s string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(s); err == nil {
		if a.Zone() != "" {
			return netip.Addr{}, false
		}
		return a.Unmap(), true
	}
	parts := strings.Split(s, ".")
	if len(parts) != 4 {
		return netip.Addr{}, false
	}
	var b [4]byte
	for i, p := range parts {
		if p == "" || len(p) > 3 {
			return netip.Addr{}, false
		}
		n, err := strconv.ParseUint(p, 10, 8)
		if err != nil {
			return netip.Addr{}, false
		}
		b[i] = byte(n)
	}
	return netip.AddrFrom4(b), true
}
