package client

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// fastLimiter serves answer to every request from a bare HTTP/1.1 server
// on loopback, allocating nothing per request itself, so that what a test
// counts is the client's.
func fastLimiter(tb testing.TB, answer string) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	resp := []byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" +
		"RateLimit-Policy: \"per-ip/1s\";q=5;w=1\r\nRateLimit: \"per-ip/1s\";r=4;t=2\r\n" +
		"X-RateLimit-Limit: 5\r\nX-RateLimit-Remaining: 4\r\nX-RateLimit-Reset: 2\r\n" +
		"Content-Length: " + strconv.Itoa(len(answer)) + "\r\n\r\n" + answer)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go serveRaw(conn, resp)
		}
	}()
	tb.Cleanup(func() { _ = ln.Close() })
	return "http://" + ln.Addr().String()
}

// serveRaw answers resp to every request on conn, reading each request's
// header lines and Content-Length body, without allocating per request.
func serveRaw(conn net.Conn, resp []byte) {
	defer conn.Close()
	r := bufio.NewReaderSize(conn, 64<<10)
	for {
		n := 0
		for {
			line, err := r.ReadSlice('\n')
			if err != nil {
				return
			}
			if len(line) <= 2 { // the blank line that ends the header
				break
			}
			const cl = "content-length:"
			if len(line) > len(cl) && strings.EqualFold(string(line[:len(cl)]), cl) {
				n, _ = strconv.Atoi(strings.TrimSpace(string(line[len(cl):])))
			}
		}
		if _, err := r.Discard(n); err != nil {
			return
		}
		if _, err := conn.Write(resp); err != nil {
			return
		}
	}
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
	// Most of a check's are net/http's round trip (its request, context,
	// response and header map); the client's own are a few.
	if check > 80 || added-check > 8 {
		t.Fatalf("allocations: Check %.1f (want at most 80), the middleware's besides %.1f (want at most 8)", check, added-check)
	}
}
