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

// A Concurrent rule admits n requests in flight behind the middleware: a
// request made while the handler serves the only slot's holder is
// refused; once the handler returns, or panics, the slot is free again,
// with reports off too.
func TestFakeConcurrentBehindTheMiddleware(t *testing.T) {
	for _, cfg := range []client.MiddlewareConfig{{}, {ReportIf: client.NeverReport}} {
		f := clienttest.New()
		f.Concurrent(clienttest.Match{Endpoint: "/api/exports"}, 1)
		var h http.Handler
		inner := 0
		mux := http.NewServeMux()
		mux.HandleFunc("/api/exports", func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("panic") != "" {
				panic(http.ErrAbortHandler)
			}
			if f.Held() != 1 {
				t.Errorf("%d holds held while the handler runs, want 1", f.Held())
			}
			inner = serve(t, h, http.MethodPost, "/api/exports").Code // while this one holds the slot
			w.WriteHeader(http.StatusAccepted)
		})
		h = client.Middleware(f, cfg)(mux)
		if rec := serve(t, h, http.MethodPost, "/api/exports"); rec.Code != http.StatusAccepted || inner != http.StatusTooManyRequests {
			t.Fatalf("a request and one inside it: %d and %d, want 202 and 429", rec.Code, inner)
		}
		func() {
			defer func() { _ = recover() }()
			serve(t, h, http.MethodPost, "/api/exports?panic=1")
		}()
		if f.Held() != 0 {
			t.Fatalf("%d holds held once the handlers returned, want 0", f.Held())
		}
		if rec := serve(t, h, http.MethodPost, "/api/exports"); rec.Code != http.StatusAccepted {
			t.Fatalf("a request once the slot is free: %d, want 202", rec.Code)
		}
		var holds int
		for _, o := range f.Outcomes() {
			if o.Hold != "" {
				holds++
				if cfg.ReportIf != nil && o.Status != 0 {
					t.Errorf("a release with reports off: status %d, want none (a release only)", o.Status)
				}
			}
		}
		if holds != 3 {
			t.Fatalf("%d outcomes with a hold, want 3 (the served, the panicked, the last): %+v", holds, f.Outcomes())
		}
	}
}
