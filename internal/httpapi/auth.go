package httpapi

import (
	"net/http"
	"strings"

	"github.com/ratewarden/ratewarden/internal/jsonwire"
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
		return rules.Request{}, jsonwire.BadRequest("endpoint: set X-Forwarded-Uri or X-Original-URI, or append the path to %s/", authPath)
	}
	return h.authSubject(r, endpoint)
}

// authSubject builds the rest of a forward-auth subject, endpoint aside,
// from r's headers and address: /v1/auth's and /v1/report/auth's.
func (h *handler) authSubject(r *http.Request, endpoint string) (rules.Request, error) {
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
				return rules.Request{}, jsonwire.BadRequest("X-Attr-%s: longer than %d bytes", name, maxAttrValue)
			}
			attrs[name] = v
		}
	}
	ip := h.clients.Of(r)
	if !ip.IsValid() {
		return rules.Request{}, jsonwire.BadRequest("ip: cannot determine the client address")
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
