package client_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/ratewarden/ratewarden/client"
)

// fakeLimiter answers every check with the decision body and the
// rate-limit headers the limiter sets (as net/http writes them: canonical).
func fakeLimiter(t *testing.T, body string, headers map[string]string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, v := range headers {
			w.Header().Set(k, v)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// The limiter's headers are in the response's http.Header under their
// canonical keys, so that Header.Get finds them: in the handler, in a
// Denied func, and in an httptest.ResponseRecorder.
func TestMiddlewareHeadersCanonical(t *testing.T) {
	t.Parallel()
	limitHeaders := map[string]string{
		"RateLimit-Policy": `"books/1m";q=3;w=60`, "RateLimit": `"books/1m";r=2;t=60`,
		"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "2", "X-RateLimit-Reset": "60",
	}
	allowed := fakeLimiter(t, `{"allowed":true,"reason":"ok","rule_id":"books","limit":3,"remaining":2}`, limitHeaders)
	c := newClient(t, client.Config{URL: allowed.URL})
	var seen http.Header
	h := client.Middleware(c, client.MiddlewareConfig{ReportIf: client.NeverReport})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = w.Header().Clone()
	}))
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/api/books/1", nil)
	h.ServeHTTP(rec, req)
	for name, want := range limitHeaders {
		if got := rec.Header().Get(name); got != want {
			t.Errorf("recorder: %s %q, want %q (header %v)", name, got, want, rec.Header())
		}
		if got := seen.Get(name); got != want {
			t.Errorf("handler: %s %q, want %q", name, got, want)
		}
	}
	for name := range rec.Header() {
		if name != http.CanonicalHeaderKey(name) {
			t.Errorf("header key %q is not canonical: Set(%q) would add a second field", name, name)
		}
	}

	denied := fakeLimiter(t, `{"allowed":false,"reason":"rate_limited","rule_id":"books","limit":3,"remaining":0,"retry_after_ms":1500}`,
		map[string]string{"RateLimit": `"books/1m";r=0;t=2`, "Retry-After": "2"})
	c = newClient(t, client.Config{URL: denied.URL})
	var retry string
	h = client.Middleware(c, client.MiddlewareConfig{Denied: func(w http.ResponseWriter, r *http.Request, d client.Decision) {
		retry = w.Header().Get("Retry-After") + " " + w.Header().Get("RateLimit")
		w.WriteHeader(http.StatusServiceUnavailable)
	}})(http.NotFoundHandler())
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/books/1", nil).WithContext(context.Background()))
	if rec.Code != http.StatusServiceUnavailable || retry != `2 "books/1m";r=0;t=2` {
		t.Fatalf("Denied saw %q, answered %d", retry, rec.Code)
	}
}
