package client

import (
	"context"
	"net"
	"net/http"
	"testing"

	"github.com/valyala/fasthttp"
)

// fastLimiter serves answer to every request from a fasthttp server on
// loopback, allocating nothing per request itself, so that what a test
// counts is the client's.
func fastLimiter(tb testing.TB, answer string) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	body := []byte(answer)
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		ctx.Response.Header.SetContentType("application/json")
		ctx.Response.Header.Set("RateLimit-Policy", `"per-ip/1s";q=5;w=1`)
		ctx.Response.Header.Set("RateLimit", `"per-ip/1s";r=4;t=2`)
		ctx.Response.Header.Set("X-RateLimit-Limit", "5")
		ctx.Response.Header.Set("X-RateLimit-Remaining", "4")
		ctx.Response.Header.Set("X-RateLimit-Reset", "2")
		ctx.SetBody(body)
	}}
	go func() { _ = srv.Serve(ln) }()
	tb.Cleanup(func() { _ = srv.Shutdown() })
	return "http://" + ln.Addr().String()
}

// nopWriter is a ResponseWriter that keeps nothing, reused across requests.
type nopWriter struct{ h http.Header }

func (w *nopWriter) Header() http.Header         { return w.h }
func (w *nopWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *nopWriter) WriteHeader(int)             {}

// The allocations of a checked request: the client's Check, and the
// middleware around a handler that writes nothing (reports off: they are
// sent from another goroutine, in batches).
func TestAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	c := newClient(t, Config{URL: fastLimiter(t, allowedAnswer)})
	ctx := context.Background()
	req := &Request{IP: "203.0.113.7", Endpoint: "/api/books/{id}", Method: "GET"}
	check := testing.AllocsPerRun(2000, func() {
		if d, err := c.Check(ctx, req); err != nil || !d.Allowed {
			t.Fatal(d, err)
		}
	})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/books/{id}", func(http.ResponseWriter, *http.Request) {})
	h := Middleware(c, MiddlewareConfig{Mux: mux, ReportIf: NeverReport})(mux)
	r, _ := http.NewRequest(http.MethodGet, "http://app/api/books/17", nil)
	r.RemoteAddr = "203.0.113.7:5555"
	w := &nopWriter{h: http.Header{}}
	middleware := testing.AllocsPerRun(2000, func() {
		clear(w.h)
		h.ServeHTTP(w, r)
	})
	bare := testing.AllocsPerRun(2000, func() {
		clear(w.h)
		mux.ServeHTTP(w, r)
	})
	added := middleware - bare
	t.Logf("allocations per request: Check %.1f; the middleware adds %.1f to the mux's %.1f", check, added, bare)
	if check > 4 || added > 10 {
		t.Fatalf("allocations: Check %.1f (want at most 4), the middleware's %.1f (want at most 10)", check, added)
	}
}
