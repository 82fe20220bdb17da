package client

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ratewarden/ratewarden/client/internal/endpoint"
)

// The client's copies of the limiter's bounds, escape, normalization and
// method check are checked against the limiter's own by the limiter's
// module (internal/clientwire), through what the client sends; these
// tests check the client's own properties.

var endpointSamples = []string{
	"", "/", "*", "GET", "post", "M-SEARCH", "/api/books/{id}", "/api/books/17", "/a%00", "/a\x00", "/a%0a", "/a\n", "/a%ff", "/a\xff",
	"/a%FF%FE", "/caf%C3%A9", "/café", "/api//x/../login;jsessionid=1?x=\x00", "/a%3Fb", "/a%23b", "/a%25b", "/a%2500", "/a%",
	"/a%2", "/a%zz", "a", "/a/%2e%2e/b", "/a;%00/b", "/\x7f", "/%7f", "/%e2%80%a8", "/a\u2028", "/a%C3", "/%C3%A9\xff",
}

// limiterView is the endpoint the limiter decides on for the field sent,
// and whether it accepts the field at all (internal/httpapi.newRequest),
// by the client's copies of the limiter's bound and normalization.
func limiterView(sent string) (string, bool) {
	if sent == "" || len(sent) > maxEndpoint || !utf8.ValidString(sent) {
		return "", false
	}
	view := endpoint.Normalize(sent)
	return view, !hasControl(view)
}

// checkWireEndpoint checks the endpoint the client sends for raw: the
// limiter accepts it and sees what its rate limit API makes of raw, or,
// when that is over the bound, a prefix of it, cut and marked.
func checkWireEndpoint(t *testing.T, raw string) {
	t.Helper()
	sent := wireEndpoint(raw)
	if raw == "" {
		if sent != "" {
			t.Fatalf("wireEndpoint(\"\") = %q, want it empty (the limiter refuses it)", sent)
		}
		return
	}
	view, ok := limiterView(sent)
	if !ok {
		t.Fatalf("wireEndpoint(%q) = %q (%d bytes): the limiter refuses it", raw, sent, len(sent))
	}
	envoy := escapeText(endpoint.Normalize(raw))
	if view == envoy {
		return
	}
	if len(view) < cutMarkLen || !strings.HasPrefix(view[len(view)-cutMarkLen:], cutMark) ||
		!strings.HasPrefix(envoy, view[:len(view)-cutMarkLen]) || len(protectPath(envoy)) <= maxEndpoint {
		t.Fatalf("wireEndpoint(%q) = %q: the limiter sees %q, its rate limit API %q", raw, sent, view, envoy)
	}
}

func TestWireEndpoint(t *testing.T) {
	for _, s := range endpointSamples {
		checkWireEndpoint(t, s)
	}
	for _, tc := range []struct{ raw, sent string }{
		{"/a%00", "/a%2500"}, {"/a\x00", "/a%2500"}, {"/a%0a", "/a%250A"}, {"/a%ff", "/a%25FF"}, {"/a%3Fb", "/a%3Fb"},
		{"/a%25b", "/a%25b"}, {"/api/books/{id}", "/api/books/{id}"}, {"/x/../api//login;s=1?q", "/api/login"},
	} {
		if got := wireEndpoint(tc.raw); got != tc.sent {
			t.Errorf("wireEndpoint(%q) = %q, want %q", tc.raw, got, tc.sent)
		}
	}
	// Long paths: cut to the bound, apart from each other, their prefix kept.
	long := "/api/" + strings.Repeat("x", 9000)
	views := map[string]bool{}
	for _, raw := range []string{long + "a", long + "b", long + "%00", "/api/" + strings.Repeat("%", 5000), "/api/" + strings.Repeat("é\x01", 3000)} {
		checkWireEndpoint(t, raw)
		view, _ := limiterView(wireEndpoint(raw))
		if !strings.HasPrefix(view, "/api/") || views[view] {
			t.Fatalf("long path %.20q...: the limiter sees %.40q..., want a prefix of its own", raw, view)
		}
		views[view] = true
	}
}

func FuzzWireEndpoint(f *testing.F) {
	for _, s := range endpointSamples {
		f.Add(s)
	}
	f.Add("/api/" + strings.Repeat("%2e%2e/%00", 1000))
	f.Fuzz(func(t *testing.T, raw string) {
		checkWireEndpoint(t, raw)
		// A queued outcome keeps a long endpoint in its sent form
		// (boundOutcome), which must be sent unchanged.
		if sent := wireEndpoint(raw); wireEndpoint(sent) != sent {
			t.Fatalf("wireEndpoint(%q) = %q, sent again as %q", raw, sent, wireEndpoint(sent))
		}
		if sent := textField(raw, maxAttrName); textField(sent, maxAttrName) != sent {
			t.Fatalf("textField(%q) = %q, sent again as %q", raw, sent, textField(sent, maxAttrName))
		}
	})
}

// A user id, tier or attribute: escaped, within its bound, two long values
// kept apart; a clean value sent as it is, without allocating.
func TestTextField(t *testing.T) {
	if got := textField("mallory\x00\n\xff", maxUserID); got != "mallory%00%0A%FF" {
		t.Fatalf("textField = %q", got)
	}
	seen := map[string]bool{}
	for _, s := range []string{strings.Repeat("u", 600), strings.Repeat("u", 599) + "v", strings.Repeat("é", 300), strings.Repeat("\x00", 200)} {
		got := textField(s, maxUserID)
		if len(got) > maxUserID || !utf8.ValidString(got) || hasControl(got) || seen[got] || !strings.Contains(got, cutMark) {
			t.Fatalf("textField(%.10q...) = %q (%d bytes)", s, got, len(got))
		}
		seen[got] = true
	}
	clean := "u-42/ü"
	if n := testing.AllocsPerRun(100, func() { _ = textField(clean, maxTier) }); n != 0 || textField(clean, maxTier) != clean {
		t.Fatalf("a clean value: %v allocations", n)
	}
	if n := testing.AllocsPerRun(100, func() { _ = wireEndpoint("/api/books/{id}") }); n != 0 {
		t.Fatalf("a clean endpoint: %v allocations", n)
	}
}
