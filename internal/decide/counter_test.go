package decide_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/testkit/decidetest"
)

// admission is the units admitted at one ms.
type admission struct{ at, units int64 }

// counterBound is the most units the sliding window counter admits in any
// closed interval [t - per, t] with a clock that never goes back (the
// window of the exact sliding_window algorithm): 2*requests -
// ceil(requests/per). Proof: such an interval starts in an aligned window k
// at elapsed x (0 <= x < per) and ends in window k+1 at elapsed x. Window k
// admitted c_k <= requests units. An admission at elapsed e <= x of window
// k+1 that brings its count to n needs c_k*(per-e) + n*per <= requests*per,
// so n <= requests - c_k*(per-x)/per, and the interval holds at most
// c_k + n <= requests + c_k*x/per <= requests + requests*(per-1)/per units.
func counterBound(requests, per int64) int64 {
	return 2*requests - (requests+per-1)/per
}

// maxInWindow returns the most units of log (ascending times) in any closed
// interval of length per; an interval with the most ends at an admission.
func maxInWindow(log []admission, per int64) int64 {
	var best, sum int64
	first := 0
	for _, a := range log {
		sum += a.units
		for log[first].at < a.at-per {
			sum -= log[first].units
			first++
		}
		best = max(best, sum)
	}
	return best
}

func counterCall(subject string, requests int64, per time.Duration, cost, now int64) decide.Call {
	return decide.Call{
		Keys:      decidetest.Keys("test:", subject),
		Algorithm: decide.SlidingWindowCounter,
		Limits:    []decide.Limit{{Requests: requests, Per: per}},
		Cost:      cost,
		NowMs:     now,
	}
}

// TestCounterWorstCase reaches the bound: every unit of window k in its last
// ms, then as many as admitted in the last ms of window k+1, 1 ms less than
// per later.
func TestCounterWorstCase(t *testing.T) {
	for _, tt := range []struct {
		requests int64
		per      time.Duration
		want     int64 // counterBound, spelled out
	}{
		{100, time.Minute, 199},
		{7, 10 * time.Millisecond, 13},
		{50, 20 * time.Millisecond, 97},
		{3, time.Millisecond, 3},
	} {
		per := tt.per.Milliseconds()
		if b := counterBound(tt.requests, per); b != tt.want {
			t.Fatalf("counterBound(%d, %d) = %d, want %d", tt.requests, per, b, tt.want)
		}
		m := decide.NewMemory()
		var log []admission
		for _, at := range []int64{1000*per + per - 1, 1000*per + 2*per - 1} {
			for m.Decide(counterCall("worst", tt.requests, tt.per, 1, at), 0).Allowed {
				log = append(log, admission{at, 1})
			}
		}
		if got := maxInWindow(log, per); got != tt.want {
			t.Errorf("%d per %s: %d units in one sliding window, want the bound %d", tt.requests, tt.per, got, tt.want)
		}
	}
}

// TestCounterBoundHolds runs random schedules (bursts at window edges
// included) and checks that no sliding window holds more than the bound.
func TestCounterBoundHolds(t *testing.T) {
	reached := 0
	for seq := range 300 {
		rng := rand.New(rand.NewPCG(7, uint64(seq)))
		requests, per := 1+rng.Int64N(12), 1+rng.Int64N(30)
		m := decide.NewMemory()
		now := 1000 * per
		var log []admission
		for range 400 {
			switch p := rng.IntN(10); {
			case p < 3: // last ms of a window
				now += per - now%per - 1
				if now%per == per-1 && rng.IntN(2) == 0 {
					now += per
				}
			case p < 5: // same ms
			default:
				now += rng.Int64N(per + 1)
			}
			cost := 1 + rng.Int64N(3)
			if m.Decide(counterCall("random", requests, time.Duration(per)*time.Millisecond, cost, now), 0).Allowed {
				log = append(log, admission{now, cost})
			}
		}
		got, bound := maxInWindow(log, per), counterBound(requests, per)
		if got > bound {
			t.Fatalf("sequence %d, %d per %dms: %d units in one sliding window, bound %d", seq, requests, per, got, bound)
		}
		if got == bound {
			reached++
		}
	}
	// the bound is tight: about a third of these schedules reach it
	if reached == 0 {
		t.Error("no schedule reached the bound: the schedules do not probe the window edges")
	}
}

// TestCounterDeniesBelowLimit shows the error in the other direction: units
// at the start of the previous window still weigh on the estimate after they
// have left the true sliding window.
func TestCounterDeniesBelowLimit(t *testing.T) {
	const requests, per = 100, 60_000
	m := decide.NewMemory()
	start := int64(1000 * per)
	for range requests {
		if !m.Decide(counterCall("early", requests, time.Minute, 1, start), 0).Allowed {
			t.Fatal("a fresh window denied")
		}
	}
	// At start+per+1 the true sliding window [start+1, start+per+1] is empty,
	// but the estimate is 100*59_999/60_000 = 99.998.
	r := m.Decide(counterCall("early", requests, time.Minute, 1, start+per+1), 0)
	if r.Allowed || r.RetryAfter != 599*time.Millisecond {
		t.Fatalf("got %+v, want denied with retry 599ms (until 100*w <= 99*60_000)", r)
	}
}

// TestCounterRepliesExact checks the meaning of the reply on random
// schedules with one limit and a clock that never goes back: remaining is
// the largest cost admitted now, retry_after the exact wait until a denied
// call is admitted, reset_after the exact wait until a call of the whole
// quota is. Probes that are denied write nothing, so they leave the state
// as it was.
func TestCounterRepliesExact(t *testing.T) {
	for seq := range 200 {
		rng := rand.New(rand.NewPCG(11, uint64(seq)))
		requests, per := 1+rng.Int64N(20), 1+rng.Int64N(50)
		m := decide.NewMemory()
		at := func(cost, now int64) decide.Result {
			return m.Decide(counterCall("exact", requests, time.Duration(per)*time.Millisecond, cost, now), 0)
		}
		now := 1000 * per
		for step := range 100 {
			now += rng.Int64N(per)
			cost := rng.Int64N(requests + 2)
			r := at(cost, now)
			fail := func(format string, args ...any) {
				t.Helper()
				t.Fatalf("sequence %d step %d (%d per %dms, now %d, cost %d, %+v): "+format,
					append([]any{seq, step, requests, per, now, cost, r}, args...)...)
			}
			if !r.Allowed {
				retry := r.RetryAfter.Milliseconds()
				if cost > requests {
					if retry != per {
						fail("retry %d for a cost above the quota, want per", retry)
					}
					continue
				}
				if retry < 1 || at(cost, now+retry-1).Allowed {
					fail("admitted before the retry")
				}
				if !at(cost, now+retry).Allowed {
					fail("denied after the retry")
				}
				now += retry
				continue
			}
			if at(r.Remaining+1, now).Allowed {
				fail("a cost of remaining+1 is admitted")
			}
			reset := r.ResetAfter.Milliseconds()
			if reset > 0 && at(requests, now+reset-1).Allowed {
				fail("the whole quota is admitted before the reset")
			}
			switch rng.IntN(4) {
			case 0:
				if !at(r.Remaining, now).Allowed {
					fail("a cost of remaining is denied")
				}
			case 1:
				if !at(requests, now+reset).Allowed {
					fail("the whole quota is denied after the reset")
				}
				now += reset
			}
		}
	}
}
