package httpapi

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/limiter"
	"github.com/ratewarden/ratewarden/internal/rules"
	"github.com/ratewarden/ratewarden/internal/testkit"
)

// TestCheckAllocations pins the allocations of one POST /v1/check decision
// between the HTTP server and Redis, so that a change that adds some fails make
// test: decoding (one string of the body), matching (one string for the
// keys of each rule that applies), the decision, the event id, the event
// encoded and published (one buffer); the rate-limit headers cost none
// (encoded into the pooled decision, set under fasthttp's canonical
// names). The
// decision port's handler serves a check with a reused request context, as
// fasthttp's server reuses them, deciding with a Decider and a Publisher
// that allocate nothing. Raise a bound only for a reason worth an
// allocation on every decision. What the server costs by itself and what
// the Redis round trip costs are measured by BenchmarkServeFloor and
// redisstore's TestCoalescerAllocations.
//
// Under the race detector sync.Pool drops objects at random, so the counts
// vary: make test runs this test again without it (make allocs).
func TestCheckAllocations(t *testing.T) {
	if testkit.RaceDetector {
		t.Skip("allocations are counted without the race detector (make allocs)")
	}
	tests := []struct {
		name, body string
		want       float64
	}{
		{"one rule, allowed", `{"ip":"203.0.113.7","endpoint":"/api/books/17","method":"GET"}`, 4},
		{"two rules, denied", `{"ip":"203.0.113.8","endpoint":"/api/books/17","user_id":"u-42","tier":"free"}`, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, dec := allocsHandler(t)
			dec.deny = strings.HasSuffix(tt.name, "denied")
			ctx := checkCtx(tt.body)
			serve := func() {
				ctx.Response.Reset()
				h(ctx)
			}
			serve()
			if ctx.Response.StatusCode() != http.StatusOK || len(ctx.Response.Header.Peek("Ratelimit-Policy")) == 0 ||
				bytes.Contains(ctx.Response.Body(), []byte(`"allowed":true`)) == dec.deny {
				t.Fatalf("status %d, headers %s: %s", ctx.Response.StatusCode(), ctx.Response.Header.Header(), ctx.Response.Body())
			}
			if got := testing.AllocsPerRun(1000, serve); got > tt.want {
				t.Errorf("%v allocations per decision, want at most %v", got, tt.want)
			} else {
				t.Logf("%v allocations per decision", got)
			}
		})
	}
}

// BenchmarkCheckPath is TestCheckAllocations's decision as a benchmark: the
// CPU of the decision path between the HTTP server and Redis, one rule.
func BenchmarkCheckPath(b *testing.B) {
	h, _ := allocsHandler(b)
	ctx := checkCtx(`{"ip":"203.0.113.7","endpoint":"/api/books/17","method":"GET"}`)
	b.ReportAllocs()
	for b.Loop() {
		ctx.Response.Reset()
		h(ctx)
	}
	if ctx.Response.StatusCode() != http.StatusOK {
		b.Fatalf("status %d: %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
}

// checkCtx is a POST /v1/check of body, as fasthttp hands it to a handler.
func checkCtx(body string) *fasthttp.RequestCtx {
	var req fasthttp.Request
	req.Header.SetMethod(http.MethodPost)
	req.SetRequestURI("/v1/check")
	req.SetBodyString(body)
	ctx := new(fasthttp.RequestCtx)
	ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}, nil)
	return ctx
}

// allocsHandler is the API over a service with one rule per client IP and
// one per user, deciding with a Decider and publishing to a Publisher that
// allocate nothing.
func allocsHandler(t testing.TB) (fasthttp.RequestHandler, *staticDecider) {
	set, err := rules.Compile(&rules.File{Rules: []rules.Rule{
		{ID: "per-ip", Algorithm: decide.SlidingWindow, Key: []string{"ip"}, Match: rules.Match{Endpoints: []string{"/api/**"}},
			Limits: []rules.Limit{{Requests: 1000, Per: rules.Duration(time.Second)}}},
		{ID: "per-user", Algorithm: decide.TokenBucket, Key: []string{"user_id"},
			Limits: []rules.Limit{{Rate: 10, Per: rules.Duration(time.Second), Burst: 20}}},
	}}, rules.Options{KeyPrefix: "rw:"})
	if err != nil {
		t.Fatal(err)
	}
	dec := &staticDecider{}
	svc := limiter.New(limiter.Config{Instance: "test"}, set, limiter.OpaqueErrors(dec), discard{}, zap.NewNop(), prometheus.NewRegistry())
	return NewFastHandler(Config{Service: svc, Log: zap.NewNop()}, http.NotFoundHandler()), dec
}

// staticDecider admits every call, or denies them all, into a slice of its
// own: it allocates nothing. Not safe for concurrent use.
type staticDecider struct {
	deny    bool
	results []decide.Result
}

func (s *staticDecider) Decide(_ context.Context, calls []decide.Call) ([]decide.Result, error) {
	s.results = s.results[:0]
	for _, c := range calls {
		q := c.Limits[0].Quota()
		r := decide.Result{Allowed: true, Limit: q, Remaining: q - 1, ResetAfter: time.Second}
		if s.deny {
			r = decide.Result{Limit: q, ResetAfter: time.Second, RetryAfter: 500 * time.Millisecond}
		}
		s.results = append(s.results, r)
	}
	return s.results, nil
}

type discard struct{}

func (discard) Publish(_, _ []byte) bool { return true }
