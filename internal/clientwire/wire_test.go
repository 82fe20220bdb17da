// Package clientwire_test checks the Go client (a module of its own, which
// cannot import the limiter's packages) against the limiter: what it sends
// is what the limiter accepts and decides on as it would a gateway's.
package clientwire_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/ratewarden/ratewarden/client"
	"github.com/ratewarden/ratewarden/internal/endpoint"
	"github.com/ratewarden/ratewarden/internal/event"
)

// The reasons are the limiter's, spelt out for the client's users.
func TestReasonsAreTheLimiters(t *testing.T) {
	for mine, theirs := range map[string]string{client.ReasonOK: event.ReasonOK, client.ReasonRateLimited: event.ReasonRateLimited,
		client.ReasonBanned: event.ReasonBanned, client.ReasonExempt: event.ReasonExempt, client.ReasonNoRule: event.ReasonNoRule} {
		if mine != theirs {
			t.Errorf("reason %q, the limiter's %q", mine, theirs)
		}
	}
}

// capture is a transport that answers every check allowed and keeps the
// last body sent: what the client sends, without a network.
type capture struct {
	mu   sync.Mutex
	last map[string]any
}

func (c *capture) RoundTrip(r *http.Request) (*http.Response, error) {
	body, err := io.ReadAll(r.Body)
	_ = r.Body.Close()
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.last = m
	c.mu.Unlock()
	answer := `{"allowed":true,"reason":"ok","mode":"redis","event_id":"e"}`
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(bytes.NewReader([]byte(answer))), Request: r}, nil
}

// sent returns the fields the client sends for a check of req. Every
// check goes through one client, made at the first: a client holds its
// report queue (about 1 MB by default), and a fuzz worker making one per
// input spends its time collecting them.
func sent(t *testing.T, req client.Request) map[string]any {
	t.Helper()
	wire.once.Do(func() {
		wire.rt = &capture{}
		wire.c, wire.err = client.New(client.Config{URL: "http://limiter:8080", Transport: wire.rt, OnFailure: client.FailClosed})
	})
	if wire.err != nil {
		t.Fatal(wire.err)
	}
	wire.mu.Lock() // one check at a time: its body is the capture's last
	defer wire.mu.Unlock()
	if d, err := wire.c.Check(context.Background(), &req); err != nil || !d.Allowed {
		t.Fatalf("check %+v: %+v, %v", req, d, err)
	}
	wire.rt.mu.Lock()
	defer wire.rt.mu.Unlock()
	return wire.rt.last
}

// wire is the client sent uses, and its transport.
var wire struct {
	once sync.Once
	mu   sync.Mutex
	c    *client.Client
	rt   *capture
	err  error
}

var endpointSamples = []string{
	"", "/", "*", "GET", "post", "M-SEARCH", "/api/books/{id}", "/api/books/17", "/a%00", "/a\x00", "/a%0a", "/a\n", "/a%ff", "/a\xff",
	"/a%FF%FE", "/caf%C3%A9", "/café", "/api//x/../login;jsessionid=1?x=\x00", "/a%3Fb", "/a%23b", "/a%25b", "/a%2500", "/a%",
	"/a%2", "/a%zz", "a", "/a/%2e%2e/b", "/a;%00/b", "/\x7f", "/%7f", "/%e2%80%a8", "/a\u2028", "/a%C3", "/%C3%A9\xff",
	strings.Repeat("M", event.MaxMethod), strings.Repeat("M", event.MaxMethod+1),
}

// cutMarkLen is the length of the mark that ends a value the client cut
// to its bound: "…" and 32 hex digits of its digest.
const cutMarkLen = len("…") + 32

// limiterView is the endpoint the limiter decides on for the field sent,
// and whether it accepts the field at all (internal/httpapi.newRequest).
func limiterView(sent string) (string, bool) {
	if sent == "" || len(sent) > event.MaxEndpoint || !utf8.ValidString(sent) {
		return "", false
	}
	view := endpoint.Normalize(sent)
	return view, !event.HasControl(view)
}

// checkEndpoint checks the endpoint the client sends for raw: the limiter
// accepts it and sees what its rate limit API makes of raw, or, when that
// is over the bound, a prefix of it, cut and marked.
func checkEndpoint(t *testing.T, raw string) string {
	t.Helper()
	if raw == "" {
		return "" // refused by the client and the limiter alike (TestNewRefusesBadURLs's neighbours)
	}
	got, _ := sent(t, client.Request{IP: "203.0.113.7", Endpoint: raw})["endpoint"].(string)
	view, ok := limiterView(got)
	if !ok {
		t.Fatalf("endpoint %.80q sent as %.80q (%d bytes): the limiter refuses it", raw, got, len(got))
	}
	envoy := event.EscapeEndpoint(endpoint.Normalize(raw))
	if view == envoy {
		return view
	}
	if len(view) < cutMarkLen || !strings.HasPrefix(view[len(view)-cutMarkLen:], "…") ||
		!strings.HasPrefix(envoy, view[:len(view)-cutMarkLen]) || sentLen(envoy) <= event.MaxEndpoint {
		t.Fatalf("endpoint %.80q sent as %.80q: the limiter sees %.80q, its rate limit API %.80q", raw, got, view, envoy)
	}
	return view
}

// sentLen is the length of endpoint e as the client sends it, with its
// '%', '?' and '#' percent-encoded so that the limiter's normalization
// gives them back: a value cut is one that would be over the bound so.
func sentLen(e string) int {
	return len(e) + 2*(strings.Count(e, "%")+strings.Count(e, "?")+strings.Count(e, "#"))
}

// The client's copies of the limiter's normalization, escape, method check
// and bounds are the limiter's, as far as what it sends shows them.
func TestFieldsAreTheLimiters(t *testing.T) {
	for _, s := range endpointSamples {
		checkEndpoint(t, s)
		if s == "" {
			continue
		}
		m, ok := sent(t, client.Request{IP: "203.0.113.7", Endpoint: "/a", Method: s})["method"]
		if ok != event.ValidMethod(s) || (ok && m != s) {
			t.Errorf("method %q sent as %v (%v), the limiter's ValidMethod %v", s, m, ok, event.ValidMethod(s))
		}
	}
	long := sent(t, client.Request{IP: "203.0.113.7", Endpoint: "/a", UserID: strings.Repeat("u", 5000), Tier: strings.Repeat("t", 5000)})
	if u, _ := long["user_id"].(string); len(u) != event.MaxUserID {
		t.Errorf("a long user id sent with %d bytes, the limiter's bound %d", len(u), event.MaxUserID)
	}
	if tier, _ := long["tier"].(string); len(tier) != event.MaxTier {
		t.Errorf("a long tier sent with %d bytes, the limiter's bound %d", len(tier), event.MaxTier)
	}
	for _, raw := range []string{"/api/" + strings.Repeat("x", 9000), "/api/" + strings.Repeat("%", 5000)} {
		if view := checkEndpoint(t, raw); !strings.HasPrefix(view, "/api/") {
			t.Errorf("a long endpoint: the limiter sees %.40q...", view)
		}
	}
	c, err := client.New(client.Config{URL: "http://limiter:8080", Transport: &capture{}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	for status, valid := range map[int]bool{event.MinStatus: true, event.MaxStatus: true, event.MinStatus - 1: false, event.MaxStatus + 1: false} {
		if got := c.ReportAsync(&client.Outcome{IP: "203.0.113.7", Endpoint: "/a", Status: status}); got != valid {
			t.Errorf("an outcome of status %d queued %v, the limiter's bounds %d-%d", status, got, event.MinStatus, event.MaxStatus)
		}
	}
}

func FuzzClientEndpoint(f *testing.F) {
	for _, s := range endpointSamples {
		f.Add(s)
	}
	f.Add("/api/" + strings.Repeat("%2e%2e/%00", 1000))
	f.Fuzz(func(t *testing.T, raw string) {
		checkEndpoint(t, raw)
	})
}
