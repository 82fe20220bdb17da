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
	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/decidetest"
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
			if got := testkit.MetricSum(t, reg, "rate_limit_redis_pipeline_calls", nil); got != float64(flushes.Load()) {
				t.Errorf("rate_limit_redis_pipeline_calls counted %v pipelines, OnFlush %d", got, flushes.Load())
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

// heldFlushes is a Coalescer's OnFlush that records the calls of every
// round trip and holds the first until release is closed.
type heldFlushes struct {
	mu       sync.Mutex
	sizes    []int
	inFlight chan struct{} // closed when the first round trip is held
	release  chan struct{}
	released sync.Once
}

func newHeldFlushes() *heldFlushes {
	return &heldFlushes{inFlight: make(chan struct{}), release: make(chan struct{})}
}

func (h *heldFlushes) releaseFirst() { h.released.Do(func() { close(h.release) }) }

func (h *heldFlushes) onFlush(n int) {
	h.mu.Lock()
	h.sizes = append(h.sizes, n)
	first := len(h.sizes) == 1
	h.mu.Unlock()
	if first {
		close(h.inFlight)
		<-h.release
	}
}

func (h *heldFlushes) recorded() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]int(nil), h.sizes...)
}

// While a round trip that is not full is in flight, calls arriving wait
// for it and then share one round trip, even with connections to spare:
// that is what keeps Redis's and the limiter's system calls per decision
// down under load.
func TestCoalescerOnePartialRoundTripAtATime(t *testing.T) {
	client := newClient(t, redisAddr())
	prefix := testPrefix(t, client)
	held := newHeldFlushes()
	co := NewCoalescer(New(client), CoalesceConfig{Pipelines: 4, Wait: time.Hour, OnFlush: held.onFlush})
	var wg sync.WaitGroup
	t.Cleanup(co.Close)
	t.Cleanup(wg.Wait)
	t.Cleanup(held.releaseFirst) // first: Close waits for the held worker
	const later = 20
	check := func(name string) {
		wg.Go(func() {
			if r, err := co.Decide(context.Background(), []decide.Call{fixedWindowCall(prefix, name, 5)}); err != nil || !r[0].Allowed || r[0].Remaining != 4 {
				t.Errorf("%s: %+v, %v", name, r, err)
			}
		})
	}
	check("first")
	<-held.inFlight
	for i := range later {
		check(string(rune('a' + i)))
	}
	testkit.WaitFor(t, 10*time.Second, "the later calls to queue behind the held round trip", func() bool { return len(co.single.queue) == later })
	held.releaseFirst()
	wg.Wait()
	if got := held.recorded(); len(got) != 2 || got[0] != 1 || got[1] != later {
		t.Errorf("calls per round trip %v, want [1 %d]", got, later)
	}
}

// Round trips overlap when the one in flight is full (a backlog of whole
// pipelines goes out in parallel), once it has been out for Wait (a distant
// node), and at once without a Wait: then a call is decided while the
// first round trip is still held.
func TestCoalescerRoundTripsOverlap(t *testing.T) {
	for _, tc := range []struct {
		name  string
		wait  time.Duration
		first int // calls of the held round trip; the limit is 3
	}{
		{"full round trip", time.Hour, 3},
		{"after the wait", time.Millisecond, 1},
		{"no wait", 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := newClient(t, redisAddr())
			prefix := testPrefix(t, client)
			held := newHeldFlushes()
			co := NewCoalescer(New(client), CoalesceConfig{Pipelines: 2, Limit: 3, Wait: tc.wait, OnFlush: held.onFlush})
			var wg sync.WaitGroup
			t.Cleanup(co.Close)
			t.Cleanup(wg.Wait)
			t.Cleanup(held.releaseFirst)
			calls := func(name string, n int) []decide.Call {
				var cs []decide.Call
				for i := range n {
					cs = append(cs, fixedWindowCall(prefix, name+string(rune('a'+i)), 5))
				}
				return cs
			}
			wg.Go(func() {
				if _, err := co.Decide(context.Background(), calls("first", tc.first)); err != nil {
					t.Errorf("held round trip: %v", err)
				}
			})
			<-held.inFlight
			done := make(chan error, 1)
			go func() { _, err := co.Decide(context.Background(), calls("second", 1)); done <- err }()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("second round trip: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("a call waited for the held round trip with a connection to spare")
			}
			held.releaseFirst()
			wg.Wait()
			if got := held.recorded(); len(got) != 2 || got[0] != tc.first || got[1] != 1 {
				t.Errorf("calls per round trip %v, want [%d 1]", got, tc.first)
			}
		})
	}
}
