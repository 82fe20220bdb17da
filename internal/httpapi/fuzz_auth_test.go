package httpapi

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/clientaddr"
	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/jsonwire"
	"github.com/ratewarden/ratewarden/internal/limiter"
	"github.com/ratewarden/ratewarden/internal/rules"
)

// authFuzzRules gives the rule set attribute names, so X-Attr-* headers are
// read.
const authFuzzRules = `
rules:
  - id: per-app
    match: {endpoints: ["/api/**"]}
    key: [ip, "attr:app_key", "attr:region"]
    algorithm: fixed_window
    limits: [{requests: 10, per: 1s}]
`

// authFuzzHandler is a handler whose service is never asked to decide:
// authRequest only reads its rules.
func authFuzzHandler(tb testing.TB) *handler {
	tb.Helper()
	file, err := rules.Parse([]byte(authFuzzRules))
	if err != nil {
		tb.Fatal(err)
	}
	set, err := rules.Compile(file, rules.Options{KeyPrefix: "fuzz:"})
	if err != nil {
		tb.Fatal(err)
	}
	svc := limiter.New(limiter.Config{}, set, limiter.OpaqueErrors(nil), nil, zap.NewNop(), prometheus.NewRegistry())
	return newHandler(Config{Service: svc, Log: zap.NewNop(), Clients: clientaddr.Resolver{Trusted: []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128"),
	}}})
}

// FuzzAuthHeaders: no combination of forward-auth headers and peer address
// makes the subject extraction panic, and whatever it accepts is a subject
// the rest of the service can rely on: a valid, normalized IP (the peer's
// unless the peer is a trusted proxy), an endpoint starting with '/', an
// upper-case method token and bounded, valid UTF-8 strings.
func FuzzAuthHeaders(f *testing.F) {
	seeds := [][9]string{
		// peer, XFF, X-Real-IP, X-Forwarded-Uri, X-Original-URI, method, user, tier, attr
		{"203.0.113.9:5000", "1.1.1.1", "2.2.2.2", "/api/books/1", "", "get", "u-1", "BASIC", "k-1"},
		{"10.0.0.2:80", "6.6.6.6, 198.51.100.4, 10.0.0.7", "", "/api/../x?y=1", "", "POST", "", "", ""},
		{"[::1]:80", "::ffff:198.51.100.6", "", "", "/api/%2e%2e/a", "", "u", "VIP", ""},
		{"[::1]:80", "[2001:db8::5%eth0]:1234", "", "api/no-slash", "", "DELETE", "", "", ""},
		{"10.0.0.2:80", "", "not-an-ip", "/", "", "G E T", "\xff\xfe", "\xc0", "\xff"},
		{"garbage", "", "", "/a", "", "", "", "", ""},
		{"[::ffff:203.0.113.1]:5", "", "", "//a//b/./c", "", "get", strings.Repeat("u", 600), "", strings.Repeat("v", 2000)},
		{"10.0.0.2:80", "10.1.1.1,,10.2.2.2", "", "/a\x00b", "", "", "", "", ""},
		{"203.0.113.9:5000", "", "", strings.Repeat("a", maxEndpoint), "", strings.Repeat("M", maxMethod), strings.Repeat("é", maxUserID/2), strings.Repeat("t", maxTier), ""},
		{"203.0.113.9:5000", "", "", "/" + strings.Repeat("%FF", (maxEndpoint-1)/3), "", "", "", "", ""},
	}
	for _, s := range seeds {
		f.Add(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8])
	}
	h := authFuzzHandler(f)
	f.Fuzz(func(t *testing.T, peer, xff, realIP, fwdURI, origURI, method, user, tier, attr string) {
		r := httptest.NewRequest(http.MethodGet, "/v1/auth", nil)
		r.RemoteAddr = peer
		// Set the map directly: the header values a server may receive are
		// wider than what Header.Set would let a test build, and
		// authRequest must hold for any of them.
		set := func(name, v string) {
			if v != "" {
				r.Header[name] = strings.Split(v, "\n")
			}
		}
		set("X-Forwarded-For", xff)
		set("X-Real-Ip", realIP)
		set("X-Forwarded-Uri", fwdURI)
		set("X-Original-Uri", origURI)
		set("X-Forwarded-Method", method)
		set("X-User-Id", user)
		set("X-User-Tier", tier)
		set("X-Attr-App_key", attr)
		set("X-Attr-Region", attr)

		req, err := h.authRequest(r)
		ip := h.clients.Of(r)
		if ip.IsValid() && (ip.Is4In6() || ip.Zone() != "") {
			t.Fatalf("clientIP %s not normalized", ip)
		}
		if peerIP := clientaddr.Parse(peer); !trusted(h, peerIP) && ip != peerIP {
			t.Fatalf("untrusted peer %q: client %s taken from the headers", peer, ip)
		}
		if err != nil {
			if _, ok := err.(*jsonwire.InputError); !ok {
				t.Fatalf("error of unexpected type %T: %v", err, err)
			}
			return
		}
		switch {
		case !req.Addr.IsValid() || req.Addr.Is4In6() || req.Addr.Zone() != "" || req.IP != req.Addr.String():
			t.Fatalf("accepted invalid ip %q", req.IP)
		case req.Addr != ip:
			t.Fatalf("subject ip %s, clientIP %s", req.Addr, ip)
		case !strings.HasPrefix(req.Endpoint, "/"):
			t.Fatalf("endpoint %q does not start with '/'", req.Endpoint)
		case req.Method == "" || req.Method != strings.ToUpper(req.Method) || len(req.Method) > maxMethod:
			t.Fatalf("method %q not an upper-case token", req.Method)
		case len(req.UserID) > maxUserID || !utf8.ValidString(req.UserID):
			t.Fatalf("user id of %d bytes accepted", len(req.UserID))
		case len(req.Tier) > maxTier || !utf8.ValidString(req.Tier):
			t.Fatalf("tier of %d bytes accepted", len(req.Tier))
		case req.Cost != 1:
			t.Fatalf("cost %d, want 1", req.Cost)
		}
		for k, v := range req.Attributes {
			if len(v) > maxAttrValue || v == "" {
				t.Fatalf("attribute %s of %d bytes accepted", k, len(v))
			}
		}
		// The decision event of an accepted subject is one the detector and
		// the archiver accept.
		ev := event.Decision{EventID: "e", TS: time.Now(), IP: req.IP, Endpoint: req.Endpoint, Method: req.Method,
			UserID: req.UserID, Tier: req.Tier, Reason: event.ReasonOK}
		if _, err := event.DecodeDecision(ev.AppendJSON(nil)); err != nil {
			t.Fatalf("accepted subject %+v makes an event consumers refuse: %v", req, err)
		}
	})
}

func trusted(h *handler, a netip.Addr) bool {
	for _, p := range h.clients.Trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// FuzzAuthOutcome: whatever a gateway sends in the outcome headers of
// /v1/report/auth, authOutcome refuses it or answers a status of an HTTP
// response (or none, to release a hold only), a cost in bounds and a
// well-formed hold or none.
func FuzzAuthOutcome(f *testing.F) {
	for _, s := range [][3]string{
		{"200", "", ""}, {"401", "7", "q1Vn2oXkT0aBw3-_9zYxLg"}, {"600", "1", ""}, {"+200", "", ""}, {"200", "-0", ""},
		{"200", "4294967296", ""}, {"0x1f4", "", ""}, {"200", "", "q1Vn2oXkT0aBw3-_9zYxLh"}, {" 200", "1 ", "\x00"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, status, cost, hold string) {
		hd := http.Header{headerStatus: {status}, headerCost: {cost}, headerHold: {hold}}
		s, h, c, err := authOutcome(hd)
		if err != nil {
			var in *jsonwire.InputError
			if !errors.As(err, &in) {
				t.Fatalf("error %v is not an input error", err)
			}
			return
		}
		releaseOnly := s == limiter.ReleaseOnly && h != ""
		if (!releaseOnly && (s < event.MinStatus || s > event.MaxStatus)) || c < 0 || c > maxCost || (h != "" && !decide.ValidHoldID(h)) {
			t.Fatalf("accepted status %d, cost %d, hold %q from %q, %q, %q", s, c, h, status, cost, hold)
		}
	})
}
