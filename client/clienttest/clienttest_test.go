package clienttest_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/ratewarden/ratewarden/client"
	"github.com/ratewarden/ratewarden/client/clienttest"
)

func serve(t *testing.T, h http.Handler, method, target string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	r := httptest.NewRequest(method, target, nil)
	r.RemoteAddr = "203.0.113.7:5555"
	h.ServeHTTP(rec, r)
	return rec
}

// The middleware in front of a Fake answers as the limiter's rules say:
// refused requests never reach the handler, allowed ones are reported.
func TestFakeBehindTheMiddleware(t *testing.T) {
	f := clienttest.New()
	f.Deny(clienttest.Match{Endpoint: "/api/login"})
	f.Ban(clienttest.Match{Endpoint: "/api/login", IP: "198.51.100.1"}) // another client: not this one's
	f.Limit(clienttest.Match{Endpoint: "/api/books", Method: http.MethodPost}, 2)
	served := 0
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { served++; w.WriteHeader(http.StatusCreated) })
	h := client.Middleware(f, client.MiddlewareConfig{})(mux)

	if rec := serve(t, h, http.MethodPost, "/api/login"); rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "1" {
		t.Fatalf("a denied request: %d, Retry-After %q; want 429 and 1", rec.Code, rec.Header().Get("Retry-After"))
	}
	for i, want := range []int{http.StatusCreated, http.StatusCreated, http.StatusTooManyRequests} {
		if rec := serve(t, h, http.MethodPost, "/api/books"); rec.Code != want {
			t.Fatalf("request %d within a limit of 2: %d, want %d", i+1, rec.Code, want)
		}
	}
	if rec := serve(t, h, http.MethodGet, "/api/books"); rec.Code != http.StatusCreated {
		t.Fatalf("a request no rule matches: %d, want it served", rec.Code)
	}
	if served != 3 {
		t.Fatalf("the handler served %d requests, want 3", served)
	}
	if n := len(f.Checks()); n != 5 || f.Checks()[0].Endpoint != "/api/login" || f.Checks()[0].IP != "203.0.113.7" {
		t.Fatalf("checks %+v", f.Checks())
	}
	outs := f.Outcomes()
	if len(outs) != 3 || outs[0].Endpoint != "/api/books" || outs[0].Status != http.StatusCreated {
		t.Fatalf("outcomes %+v, want the 3 served requests", outs)
	}
	f.Reset()
	if rec := serve(t, h, http.MethodPost, "/api/login"); rec.Code != http.StatusCreated || len(f.Checks()) != 1 {
		t.Fatalf("after Reset: %d, checks %d; want served, one check", rec.Code, len(f.Checks()))
	}
}

// The rule set last decides; a banned client is answered 403.
func TestFakeLastRuleDecides(t *testing.T) {
	f := clienttest.New()
	f.Allow(clienttest.Match{})
	f.Ban(clienttest.Match{UserID: "mallory"})
	h := client.Middleware(f, client.MiddlewareConfig{User: func(r *http.Request) string { return r.Header.Get("X-User") }})(
		http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	rec := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodGet, "/x", nil)
	r.Header.Set("X-User", "mallory")
	h.ServeHTTP(rec, r)
	if rec.Code != http.StatusForbidden || rec.Header().Get("Retry-After") != "3600" {
		t.Fatalf("banned: %d, Retry-After %q", rec.Code, rec.Header().Get("Retry-After"))
	}
	if rec := serve(t, h, http.MethodGet, "/x"); rec.Code != http.StatusOK {
		t.Fatalf("another user: %d", rec.Code)
	}
}
