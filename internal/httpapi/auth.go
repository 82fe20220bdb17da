package httpapi

import (
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/ratewarden/ratewarden/internal/rules"
)

// authPath is the forward-auth endpoint. Envoy's ext_authz (HTTP service)
// appends the original path to it, so /v1/auth/api/login decides /api/login.
const authPath = "/v1/auth"

// authRequest builds the subject of a forward-auth call from its headers
// (nginx auth_request, Traefik forwardAuth, Envoy ext_authz).
func (h *handler) authRequest(r *http.Request) (rules.Request, error) {
	endpoint := firstHeader(r.Header, "X-Forwarded-Uri", "X-Original-Uri")
	if endpoint == "" {
		endpoint = strings.TrimPrefix(r.URL.EscapedPath(), authPath)
		if r.URL.RawQuery != "" && endpoint != "" {
			endpoint += "?" + r.URL.RawQuery
		}
	}
	if endpoint == "" {
		return rules.Request{}, badRequest("endpoint: set X-Forwarded-Uri or X-Original-URI, or append the path to %s/", authPath)
	}
	method := firstHeader(r.Header, "X-Forwarded-Method", "X-Original-Method")
	if method == "" {
		method = r.Method
	}
	var attrs map[string]string
	for _, name := range h.svc.Rules().AttrNames() {
		if v := r.Header.Get("X-Attr-" + name); v != "" {
			if attrs == nil {
				attrs = make(map[string]string)
			}
			if len(v) > maxAttrValue {
				return rules.Request{}, badRequest("X-Attr-%s: longer than %d bytes", name, maxAttrValue)
			}
			attrs[name] = v
		}
	}
	ip := h.clientIP(r)
	if !ip.IsValid() {
		return rules.Request{}, badRequest("ip: cannot determine the client address")
	}
	return newRequest(r.Header.Get("X-User-Id"), ip.String(), endpoint, method, r.Header.Get("X-User-Tier"), 1, attrs)
}

func firstHeader(h http.Header, names ...string) string {
	for _, n := range names {
		if v := h.Get(n); v != "" {
			return v
		}
	}
	return ""
}

// clientIP is the peer address, unless the peer is a trusted proxy: then the
// right-most address in X-Forwarded-For that is not a trusted proxy (clients
// can prepend anything, but not append), else X-Real-IP. If every hop is
// trusted the left-most is the client; an unparsable hop stops the walk at
// the last valid one.
func (h *handler) clientIP(r *http.Request) netip.Addr {
	peer := parseAddr(r.RemoteAddr)
	if !h.trusted(peer) {
		return peer
	}
	hops := r.Header.Values("X-Forwarded-For")
	if len(hops) == 0 {
		if real := parseAddr(r.Header.Get("X-Real-Ip")); real.IsValid() {
			return real
		}
		return peer
	}
	client := peer
	for i := len(hops) - 1; i >= 0; i-- {
		parts := strings.Split(hops[i], ",")
		for j := len(parts) - 1; j >= 0; j-- {
			hop := parseAddr(parts[j])
			if !hop.IsValid() {
				return client
			}
			client = hop
			if !h.trusted(hop) {
				return client
			}
		}
	}
	return client
}

func (h *handler) trusted(a netip.Addr) bool {
	for _, p := range h.cfg.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// parseAddr accepts "ip", "ip:port" and "[ipv6]:port", normalizing IPv4-mapped
// IPv6 to IPv4 and dropping zones; invalid input gives the zero Addr.
func parseAddr(s string) netip.Addr {
	s = strings.TrimSpace(s)
	if host, _, err := net.SplitHostPort(s); err == nil {
		s = host
	}
	a, err := netip.ParseAddr(strings.Trim(s, "[]"))
	if err != nil {
		return netip.Addr{}
	}
	return a.Unmap().WithZone("")
}
