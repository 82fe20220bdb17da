package rlsapi_test

import (
	"context"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/limiter"
	"github.com/ratewarden/ratewarden/internal/rlsapi"
	"github.com/ratewarden/ratewarden/internal/rules"
	"github.com/ratewarden/ratewarden/internal/testkit"
)

// TestShouldRateLimitAllocations pins the allocations of one ShouldRateLimit
// decision between grpc-go and Redis, so that a change that adds some fails
// make test: the request converted, the descriptors matched and their keys
// (1 each), the decision, the event id (1), the event encoded and published
// (1), and the response's messages (1 for one descriptor, 5 for more). The service is called
// as gRPC calls it, with a Decider and a Publisher that allocate nothing.
// Raise a bound only for a reason worth an allocation on every decision.
// What grpc-go costs by itself and what the Redis round trip costs are
// measured by BenchmarkServeGRPCFloor and redisstore's
// TestCoalescerAllocations.
//
// Under the race detector sync.Pool drops objects at random, so the counts
// vary: make test runs this test again without it (make allocs).
func TestShouldRateLimitAllocations(t *testing.T) {
	if testkit.RaceDetector {
		t.Skip("allocations are counted without the race detector (make allocs)")
	}
	perIP := rule("per-ip", "edge", 1000, time.Second, "remote_address", "")
	perIP.Descriptor.Name = "per_ip"
	perPath := rule("per-path", "edge", 10, time.Minute, "path", "")
	set, err := rules.Compile(&rules.File{Rules: []rules.Rule{perIP, perPath}}, rules.Options{KeyPrefix: "rw:"})
	if err != nil {
		t.Fatal(err)
	}
	dec := &staticDecider{}
	reg := prometheus.NewRegistry()
	svc := limiter.New(limiter.Config{Instance: "test"}, set, limiter.OpaqueErrors(dec), discard{}, zap.NewNop(), reg)
	srv := rlsapi.New(rlsapi.Config{}, svc, zap.NewNop(), reg)
	tests := []struct {
		name string
		req  *rlsv3.RateLimitRequest
		deny bool
		want float64
	}{
		{"one descriptor, allowed", request("edge", desc("remote_address", "203.0.113.7")), false, 4},
		{"two descriptors, one denied", request("edge", desc("remote_address", "203.0.113.7"), desc("path", "/api/books")), true, 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dec.deny = tt.deny
			ctx := context.Background()
			call := func() {
				resp, err := srv.ShouldRateLimit(ctx, tt.req)
				if err != nil || (resp.OverallCode == overLimit) != tt.deny {
					t.Fatalf("%v, %v", resp, err)
				}
			}
			call()
			if got := testing.AllocsPerRun(1000, call); got > tt.want {
				t.Errorf("%v allocations per decision, want at most %v", got, tt.want)
			} else {
				t.Logf("%v allocations per decision", got)
			}
		})
	}
}

// staticDecider admits every call, or denies the calls of rules limited per
// minute, into a slice of its own: it allocates nothing. Not safe for
// concurrent use.
type staticDecider struct {
	deny    bool
	results []decide.Result
}

func (s *staticDecider) Decide(_ context.Context, calls []decide.Call) ([]decide.Result, error) {
	s.results = s.results[:0]
	for _, c := range calls {
		q := c.Limits[0].Quota()
		r := decide.Result{Allowed: true, Limit: q, Remaining: q - 1, ResetAfter: time.Second}
		if s.deny && c.Limits[0].Per == time.Minute {
			r = decide.Result{Limit: q, ResetAfter: time.Minute, RetryAfter: time.Minute}
		}
		s.results = append(s.results, r)
	}
	return s.results, nil
}

type discard struct{}

func (discard) Publish(_, _ []byte) bool { return true }
