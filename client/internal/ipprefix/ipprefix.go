// Package ipprefix is the client's copy of the limiter's internal/ipprefix,
// which the limiter's tests keep the same.
package ipprefix

import (
	"fmt"
	"net/netip"
)

// Parse parses an IP (as a single-address prefix) or a CIDR, masked, with
// IPv4 addresses in IPv6 form (IPv4-mapped, or the translators' 64:ff9b::/96)
// as IPv4, as Client counts a client. A zoned address is refused.
func Parse(s string) (netip.Prefix, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		if a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("zone not allowed")
		}
		a = Client(a)
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	if a := p.Addr(); p.Bits() >= 96 && (a.Is4In6() || nat64.Contains(a)) {
		p = netip.PrefixFrom(Client(a), p.Bits()-96)
	}
	return p.Masked(), nil
}

// nat64 is the well-known prefix of IPv4/IPv6 translation (RFC 6052,
// 64:ff9b::/96): a translator in front of an IPv6-only service (SIIT,
// RFC 7915) shows each IPv4 client as this prefix and the client's address.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// Client returns the address a client is counted as: a, without its zone,
// with an IPv4 client seen through IPv6 as its IPv4 address, whether
// IPv4-mapped (::ffff:a.b.c.d) or translated (64:ff9b::a.b.c.d). Without
// the second, every IPv4 client behind a translator would share one IPv6
// prefix: one budget, and one ban shutting them all out. It does not
// allocate.
func Client(a netip.Addr) netip.Addr {
	a = a.Unmap().WithZone("")
	if a.Is6() && nat64.Contains(a) {
		b := a.As16()
		return netip.AddrFrom4([4]byte(b[12:]))
	}
	return a
}
