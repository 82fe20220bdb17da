package adminapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratewarden/ratewarden/internal/bearer"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/rules"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time                { return c.t }
func (c *fakeClock) advance(d time.Duration)       { c.t = c.t.Add(d) }
func newFakeClock() *fakeClock                     { return &fakeClock{t: time.Unix(1_700_000_000, 0)} }
func addr(s string) netip.Addr                     { return netip.MustParseAddr(s) }
func admitted(l *sourceLimiter, a netip.Addr) bool { w, _ := l.allow(a); return w == 0 }

func TestAdminLimiter(t *testing.T) {
	t.Run("burst then rate", func(t *testing.T) {
		clk := newFakeClock()
		l := newSourceLimiter(10, 20, 100, clk.now)
		a := addr("203.0.113.1")
		for i := range 20 {
			if !admitted(l, a) {
				t.Fatalf("request %d of the burst refused", i+1)
			}
		}
		wait, first := l.allow(a)
		if wait <= 0 || wait > 100*time.Millisecond || !first {
			t.Fatalf("21st request: wait %v first %v, want (0,100ms] and first", wait, first)
		}
		if _, first := l.allow(a); first {
			t.Fatal("second refusal in a row reported as first: it would be logged again")
		}
		clk.advance(100 * time.Millisecond) // one token
		if !admitted(l, a) || admitted(l, a) {
			t.Fatal("after 100ms exactly one more request should pass")
		}
	})
	t.Run("sources are independent", func(t *testing.T) {
		clk := newFakeClock()
		l := newSourceLimiter(10, 2, 100, clk.now)
		admitted(l, addr("203.0.113.1"))
		admitted(l, addr("203.0.113.1"))
		if admitted(l, addr("203.0.113.1")) {
			t.Fatal("203.0.113.1 over its burst admitted")
		}
		if !admitted(l, addr("203.0.113.2")) {
			t.Fatal("another source refused")
		}
	})
	t.Run("table bounded, overflow shared, idle sources forgotten", func(t *testing.T) {
		clk := newFakeClock()
		l := newSourceLimiter(1, 2, 3, clk.now)
		for i := range 1000 {
			a := netip.AddrFrom4([4]byte{198, 51, byte(i >> 8), byte(i)})
			l.allow(a)
			if len(l.buckets) > 3 {
				t.Fatalf("%d sources tracked, want at most 3", len(l.buckets))
			}
		}
		if admitted(l, addr("2001:db8::1")) {
			t.Fatal("the overflow bucket shared by 997 sources still had tokens")
		}
		clk.advance(10 * time.Second) // every bucket refills: the sweep frees the table
		if !admitted(l, addr("2001:db8::1")) {
			t.Fatal("new source refused after the table could be swept")
		}
		if _, ok := l.buckets[rules.IPPrefix(addr("2001:db8::1"), 64)]; !ok {
			t.Fatal("new source not tracked after the sweep")
		}
	})
	t.Run("an IPv6 /64 is one source", func(t *testing.T) {
		clk := newFakeClock()
		l := newSourceLimiter(10, 2, 100, clk.now)
		if !admitted(l, addr("2001:db8:1:2::1")) || !admitted(l, addr("2001:db8:1:2::2")) {
			t.Fatal("the first two requests of the /64 refused")
		}
		if admitted(l, addr("2001:db8:1:2:ffff::3")) {
			t.Fatal("a third address of the /64 got a fresh burst")
		}
		if !admitted(l, addr("2001:db8:1:3::1")) {
			t.Fatal("an address of the next /64 refused")
		}
		for _, a := range []string{"203.0.113.1", "203.0.113.1", "203.0.113.2"} {
			if !admitted(l, addr(a)) {
				t.Fatal("IPv4 sources are grouped")
			}
		}
	})
}

// Past its burst a source gets 429 with Retry-After, before the token is
// even checked (so guessing the token is bounded too), and both kinds of
// refusal are logged with the source address.
func TestRateLimitOverHTTP(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	clk := newFakeClock()
	log := zap.New(core)
	h := &handler{cfg: Config{Gate: bearer.NewGate("admin", "ratewarden admin", []string{"s3cret"}, log, prometheus.NewRegistry()),
		Log: log, Blacklist: emptyBlacklist{}},
		limit: newSourceLimiter(sourceRate, sourceBurst, maxSources, clk.now)}
	mux := h.routes()

	get := func(peer, token string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, "/v1/admin/bans", nil)
		r.RemoteAddr = peer
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		return w
	}
	for i := range sourceBurst {
		if w := get("203.0.113.5:4000", "guess"); w.Code != http.StatusUnauthorized {
			t.Fatalf("request %d: status %d, want 401", i+1, w.Code)
		}
	}
	for i := range 5 {
		w := get("203.0.113.5:4001", "guess")
		if w.Code != http.StatusTooManyRequests {
			t.Fatalf("request %d past the burst: status %d, want 429", i+1, w.Code)
		}
		if s, err := strconv.Atoi(w.Header().Get("Retry-After")); err != nil || s < 1 {
			t.Fatalf("Retry-After %q, want a positive number of seconds", w.Header().Get("Retry-After"))
		}
	}
	if w := get("203.0.113.6:4000", "guess"); w.Code != http.StatusUnauthorized {
		t.Fatalf("another source: status %d, want 401", w.Code)
	}
	if n := logs.FilterMessage("request refused: missing or invalid bearer token").FilterField(zap.String("source", "203.0.113.5:4000")).Len(); n != sourceBurst {
		t.Errorf("%d token refusals logged with their source, want %d", n, sourceBurst)
	}
	if n := logs.FilterMessage("admin request refused: rate limited").FilterField(zap.String("source", "203.0.113.5:4001")).Len(); n != 1 {
		t.Errorf("%d rate-limit refusals logged, want 1 per run of refusals", n)
	}
	clk.advance(time.Second)
	if w := get("203.0.113.5:4002", "s3cret"); w.Code != http.StatusOK {
		t.Fatalf("after a second, with the token: status %d, want 200", w.Code)
	}
}

type emptyBlacklist struct{}

func (emptyBlacklist) Add(context.Context, event.Ban) (bool, error) { return true, nil }
func (emptyBlacklist) Lookup(context.Context, string, string, time.Time) (event.Ban, bool, error) {
	return event.Ban{}, false, nil
}
func (emptyBlacklist) Remove(context.Context, string, string) (bool, error) {
	return false, nil
}
func (emptyBlacklist) Active(context.Context, time.Time) ([]event.Ban, error) { return nil, nil }
