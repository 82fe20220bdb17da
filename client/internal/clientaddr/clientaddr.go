// Package clientaddr is the client's copy of the limiter's
// internal/clientaddr: it finds the client of a request as the limiter
// does, so that the middleware counts whom the limiter's own forward auth
// would. The limiter's tests keep the two the same.
package clientaddr

import (
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/ratewarden/ratewarden/client/internal/ipprefix"
)

// Resolver finds clients behind Trusted, the proxies whose X-Forwarded-For
// and X-Real-IP are believed (TRUSTED_PROXIES). The zero Resolver trusts no
// proxy: the client is the peer.
type Resolver struct {
	Trusted []netip.Prefix
}

// Of is r's client: the peer address, unless the peer is a trusted proxy:
// then the right-most address in X-Forwarded-For that is not a trusted
// proxy (clients can prepend anything, but not append), else X-Real-IP. If
// every hop is trusted the left-most is the client; an unparsable hop stops
// the walk at the last valid one. The zero Addr when the peer is not an
// address.
func (res Resolver) Of(r *http.Request) netip.Addr {
	return res.Resolve(Parse(r.RemoteAddr), r.Header.Values("X-Forwarded-For"), r.Header.Get("X-Real-Ip"))
}

// Resolve is Of for a request that is not an *http.Request (a gRPC call,
// whose metadata carries the headers): the client of a connection from
// peer whose X-Forwarded-For values are forwardedFor and X-Real-IP is
// realIP, both read only when peer is trusted. Call Trusts first to skip
// reading them for an untrusted peer.
func (res Resolver) Resolve(peer netip.Addr, forwardedFor []string, realIP string) netip.Addr {
	if !res.Trusts(peer) {
		return peer
	}
	if len(forwardedFor) == 0 {
		if real := Parse(realIP); real.IsValid() {
			return real
		}
		return peer
	}
	client := peer
	for i := len(forwardedFor) - 1; i >= 0; i-- {
		hops := forwardedFor[i]
		for {
			j := strings.LastIndexByte(hops, ',')
			hop := Parse(hops[j+1:])
			if !hop.IsValid() {
				return client
			}
			client = hop
			if !res.Trusts(hop) {
				return client
			}
			if j < 0 {
				break
			}
			hops = hops[:j]
		}
	}
	return client
}

// Trusts reports whether a is one of the trusted proxies.
func (res Resolver) Trusts(a netip.Addr) bool {
	for _, p := range res.Trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Parse accepts "ip", "ip:port" and "[ipv6]:port", normalizing IPv4-mapped
// IPv6 to IPv4 and dropping zones; invalid input gives the zero Addr.
func Parse(s string) netip.Addr {
	s = strings.TrimSpace(s)
	if host, _, err := net.SplitHostPort(s); err == nil {
		s = host
	}
	a, err := netip.ParseAddr(strings.Trim(s, "[]"))
	if err != nil {
		return netip.Addr{}
	}
	return ipprefix.Client(a)
}
