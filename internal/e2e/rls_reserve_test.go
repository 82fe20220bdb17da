package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Envoy AI Gateway's pattern with reservations, over gRPC on two real
// limiters: the request-time calls (hits_addend 0) of 50 requests at once,
// spread over both, against a budget of 10 estimates admit exactly 10, for
// both algorithms that reserve; each admitted request's stream-done call,
// sent to the other limiter, settles its reservation once, and the same
// call again settles nothing.
func TestRLSReservationsAcrossTwoLimiters(t *testing.T) {
	budgets := map[string]string{
		"fixed_window": "rate_limit: {unit: hour, requests_per_unit: 1000, reserve: 100}",
		"token_bucket": "rate_limit: {unit: day, requests_per_unit: 1, burst: 1000, algorithm: token_bucket, reserve: 100}",
	}
	files := map[string]string{}
	for alg, rl := range budgets {
		files[alg+".yaml"] = fmt.Sprintf("domain: llm-%s\ndescriptors:\n  - key: api_key\n    %s\n", alg, rl)
	}
	e := newEnv(t)
	dir := rlsDir(t, files)
	limiters := []*proc{e.start("limiter", "RLS_CONFIG_DIR", dir), e.start("limiter", "RLS_CONFIG_DIR", dir)}
	clients := []rlsv3.RateLimitServiceClient{rlsClient(t, limiters[0]), rlsClient(t, limiters[1])}
	call := func(c rlsv3.RateLimitServiceClient, domain, entries string, hits uint64) *rlsv3.RateLimitResponse {
		req := rlsRequest(domain, entries)
		req.Descriptors[0].HitsAddend = wrapperspb.UInt64(hits)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := c.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Errorf("%s %s: %v", domain, entries, err)
			return &rlsv3.RateLimitResponse{Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{}}}
		}
		return resp
	}
	for alg := range budgets {
		t.Run(alg, func(t *testing.T) {
			domain := "llm-" + alg
			withinAnHour(t, func(round int) string {
				key := fmt.Sprintf("api_key=k-%d", round)
				ids := make([]string, 50)
				owner := make([]int, 50)
				var wg sync.WaitGroup
				for i := range 50 {
					wg.Go(func() {
						owner[i] = i % 2
						resp := call(clients[owner[i]], domain, key, 0)
						if resp.OverallCode == rlsv3.RateLimitResponse_OK {
							ids[i] = resp.DynamicMetadata.GetFields()["hold"].GetStringValue()
						}
					})
				}
				wg.Wait()
				admitted := 0
				for _, id := range ids {
					if id != "" {
						admitted++
					}
				}
				if admitted != 10 {
					return fmt.Sprintf("50 request-time calls against 10 estimates: %d admitted with an id, want 10", admitted)
				}
				// Each used 40 of its 100, settled on the other limiter.
				settled := 0
				for i, id := range ids {
					if id == "" {
						continue
					}
					settled++
					left := call(clients[1-owner[i]], domain, key+",hold="+id, 40).Statuses[0].LimitRemaining
					if want := uint32(60 * settled); left != want {
						return fmt.Sprintf("settle %d: %d left, want %d", settled, left, want)
					}
					// Envoy's stream-done call again, to the first limiter.
					if left := call(clients[owner[i]], domain, key+",hold="+id, 40).Statuses[0].LimitRemaining; left != uint32(60*settled) {
						return fmt.Sprintf("a replayed settle %d: %d left, want %d", settled, left, 60*settled)
					}
				}
				return ""
			})
		})
	}
}
