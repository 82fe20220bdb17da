package redisstore

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/decide/decidetest"
)

// Concurrent callers share pipelines and still get exactly the limit; the
// histogram counts every pipeline.
func TestCoalescerExactUnderConcurrency(t *testing.T) {
	client := newClient(t, redisAddr())
	exactUnderConcurrency(t, client, func(t *testing.T) decider {
		var shared, flushes atomic.Int64 // pipelines that carried more than one call; all pipelines
		reg := prometheus.NewRegistry()
		co := NewCoalescer(New(client), CoalesceConfig{Pipelines: 4, Registerer: reg, OnFlush: func(n int) {
			flushes.Add(1)
			if n > 1 {
				shared.Add(1)
			}
		}})
		t.Cleanup(func() {
			co.Close()
			if shared.Load() == 0 {
				t.Errorf("200 concurrent callers on 4 connections never shared a pipeline")
			}
			if n := testutil.CollectAndCount(reg, "rate_limit_redis_pipeline_calls"); n != 1 {
				t.Errorf("rate_limit_redis_pipeline_calls: %d series, want 1", n)
			}
			families, _ := reg.Gather()
			if got := families[0].GetMetric()[0].GetHistogram().GetSampleCount(); got != uint64(flushes.Load()) {
				t.Errorf("rate_limit_redis_pipeline_calls counted %d pipelines, OnFlush %d", got, flushes.Load())
			}
		})
		return co.Decide
	})
}

// Every caller gets its own results back, and a failing call fails only its
// caller even when it shares the pipeline.
func TestCoalescerRoutesResultsAndErrors(t *testing.T) {
	client := newClient(t, redisAddr())
	prefix := testPrefix(t, client)
	// One pipeline held open long enough to take every caller below.
	co := NewCoalescer(New(client), CoalesceConfig{Pipelines: 1, Window: 200 * time.Millisecond, Limit: 1000})
	defer co.Close()
	broken := decidetest.Keys(prefix, "broken")
	if err := client.Set(context.Background(), broken.State, "not a sorted set", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	const callers = 50
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			keys := decidetest.Keys(prefix, "k"+string(rune('A'+i)))
			if i == 7 {
				keys = broken
			}
			calls := []decide.Call{
				{Keys: keys, Algorithm: decide.SlidingWindow, Limits: []decide.Limit{{Requests: int64(10 + i), Per: time.Minute}}, Cost: 1},
				{Keys: decidetest.Keys(prefix, "shared"), Algorithm: decide.TokenBucket, Limits: []decide.Limit{{Rate: 1, Per: time.Hour, Burst: 1000}}, Cost: 1},
			}
			r, err := co.Decide(context.Background(), calls)
			if i == 7 {
				if err == nil {
					t.Errorf("caller 7 used a key of the wrong type and got no error")
				}
				return
			}
			if err != nil {
				t.Errorf("caller %d: %v", i, err)
				return
			}
			if len(r) != 2 || r[0].Limit != int64(10+i) || r[0].Remaining != int64(9+i) || !r[1].Allowed || r[1].Limit != 1000 {
				t.Errorf("caller %d got %+v", i, r)
			}
		})
	}
	wg.Wait()
}

func TestCoalescerContextAndClose(t *testing.T) {
	client := newClient(t, redisAddr())
	co := NewCoalescer(New(client), CoalesceConfig{})
	c := decide.Call{Keys: decidetest.Keys(testPrefix(t, client), "x"), Algorithm: decide.FixedWindow,
		Limits: []decide.Limit{{Requests: 1, Per: time.Second}}, Cost: 1}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := co.Decide(ctx, []decide.Call{c}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled context: got %v", err)
	}
	if r, err := co.Decide(context.Background(), []decide.Call{c}); err != nil || !r[0].Allowed {
		t.Fatalf("first call: %+v, %v", r, err)
	}
	co.Close()
	co.Close() // idempotent
	if _, err := co.Decide(context.Background(), []decide.Call{c}); !errors.Is(err, errClosed) {
		t.Fatalf("after Close: got %v, want errClosed", err)
	}
}
