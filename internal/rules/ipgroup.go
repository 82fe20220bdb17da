package rules

import (
	"net/netip"
	"strings"

	"github.com/ratewarden/ratewarden/internal/ipprefix"
)

// IPv6 grouping. An IPv4 address is one client, but a client holding an
// IPv6 /64 (the smallest prefix a subscriber is given) can send from 2^64
// addresses, each of which would get a fresh budget and escape every ban.
// So IPv6 addresses are limited, detected and banned by prefix: the
// address's /64 unless a rule (ipv6_prefix) or the detection section
// (detection.ipv6_prefix) says otherwise; 128 means no grouping.
const (
	// DefaultIPv6Prefix is the grouping of IPv6 addresses when none is set.
	DefaultIPv6Prefix = 64
	// MinIPv6Prefix is the coarsest grouping accepted: a /32 is the smallest
	// block a registry gives an ISP, so a shorter prefix would put unrelated
	// networks in one group (and one ban).
	MinIPv6Prefix = 32
)

// IPPrefix returns the group of address a: an IPv4 address (IPv4-mapped
// IPv6 included) as its /32, an IPv6 address as its /bits prefix, masked. A
// bits of 0 means DefaultIPv6Prefix; one outside 1..128 (which validation
// refuses) means 128, no grouping. The zone is dropped. An invalid a gives
// the zero Prefix. It does not allocate.
func IPPrefix(a netip.Addr, bits int) netip.Prefix {
	if !a.IsValid() {
		return netip.Prefix{}
	}
	a = ipprefix.Client(a)
	if a.Is4() {
		return netip.PrefixFrom(a, 32)
	}
	if bits == 0 {
		bits = DefaultIPv6Prefix
	}
	if bits < 1 || bits > 128 {
		bits = 128
	}
	p, _ := a.Prefix(bits) // cannot fail: bits is within the address's length
	return p
}

// IPSubject returns the subject that stands for address a in limit keys,
// detection and bans (see IPPrefix for bits): an IPv4 address as it is
// ("203.0.113.7"), an IPv6 address as its prefix in CIDR form
// ("2001:db8:1:2::/64"), or as the address itself at 128. An invalid a
// gives "". It allocates the string; IPSubjectOf does not when the
// address is its own subject.
func IPSubject(a netip.Addr, bits int) string {
	p := IPPrefix(a, bits)
	switch {
	case !p.IsValid():
		return ""
	case p.IsSingleIP():
		return p.Addr().String()
	}
	return prefixString(p)
}

// prefixString is p.String() in one allocation (String makes three).
func prefixString(p netip.Prefix) string {
	var buf [64]byte // "xxxx:...:xxxx/128" is at most 43 bytes
	return string(p.AppendTo(buf[:0]))
}

// IPSubjectOf is IPSubject for an address in text form, such as a decision
// event's ip. Text that is not an IP address (a subject already grouped,
// or garbage) is returned unchanged, so IPSubjectOf(IPSubjectOf(s)) ==
// IPSubjectOf(s) and a malformed event never becomes someone else's
// subject.
func IPSubjectOf(ip string, bits int) string {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return ip
	}
	p := IPPrefix(a, bits)
	if !p.IsSingleIP() {
		return prefixString(p)
	}
	var buf [64]byte // an address in text is at most 45 bytes without its zone
	if string(p.Addr().AppendTo(buf[:0])) == ip {
		return ip // already canonical: no allocation
	}
	return p.Addr().String()
}

// IPNetwork returns the network of the address ip (text) as a prefix in
// CIDR form: the /ipv4 of an IPv4 address (IPv4-mapped IPv6 included), the
// /ipv6 of an IPv6 one, masked ("192.0.2.0/24", "2001:db8:1::/48"). It is
// what detection counts distinct networks by; bans keep IPSubject's
// grouping. Text that is not an IP address is returned unchanged, as
// IPSubjectOf does; prefix lengths beyond the address's are cut to it.
func IPNetwork(ip string, ipv4, ipv6 int) string {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return ip
	}
	a = ipprefix.Client(a)
	bits := ipv6
	if a.Is4() {
		bits = ipv4
	}
	p, _ := a.Prefix(max(0, min(bits, a.BitLen()))) // cannot fail: bits is within the address's length
	return prefixString(p)
}

// ParseIPSubject parses an ip-scope ban subject: an IP address, or an
// IPv6 prefix in CIDR form as IPSubject writes it (a prefix whose host bits
// are set is masked). It returns the addresses the subject covers, an
// address as a single-address prefix, with IPv4-mapped IPv6 unmapped. IPv4
// prefixes are not subjects (IPv4 is never grouped) and are refused, as are
// zones.
func ParseIPSubject(s string) (netip.Prefix, bool) {
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			return netip.Prefix{}, false
		}
		a = ipprefix.Client(a)
		return netip.PrefixFrom(a, a.BitLen()), true
	}
	p, err := netip.ParsePrefix(s)
	if err != nil || !p.Addr().Is6() || p.Addr().Is4In6() {
		return netip.Prefix{}, false
	}
	return p.Masked(), true
}
