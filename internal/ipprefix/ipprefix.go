// Package ipprefix reads IP addresses and CIDR prefixes as every list of
// them in ratewarden is read (the rules' exempt.ips, TRUSTED_PROXIES), so
// that an address given in one form matches the peers the limiter sees.
package ipprefix

import (
	"fmt"
	"net/netip"
)

// Parse parses an IP (as a single-address prefix) or a CIDR, masked and
// with IPv4-mapped IPv6 addresses unmapped. A zoned address is refused.
func Parse(s string) (netip.Prefix, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		if a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("zone not allowed")
		}
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p.Masked(), nil
}
