package main

import (
	"math"
	"sync/atomic"
	"time"
)

// lateAfter is how far behind its due time an open-loop request may be
// taken by a worker before it counts as late: above scheduler jitter, well
// below a latency anyone would accept.
const lateAfter = time.Millisecond

// schedule decides which requests are sent, and in open loop when. It is
// shared by the workers.
//
// Closed loop: every worker sends back to back until the end time (or the
// -requests budget is spent).
//
// Open loop: request k is due at start + k/rate, whoever sends it: the
// workers take the next due request as soon as they are free, so a slow
// answer delays the requests behind it and their latency, counted from the
// due time, says so (no coordinated omission). A request that a worker
// waits for counts from its actual send instead: the worker was idle, and
// the timer's own lateness (up to a millisecond when the process is idle,
// as Go's poller sleeps in whole milliseconds) is not the limiter's.
type schedule struct {
	start   time.Time // of the warm-up, or of the measurement without one
	measure time.Time // measurement starts: earlier requests are warm-up
	end     time.Time // no request starts at or after it
	limit   uint64    // measured requests at most; 0: no limit

	rate      float64 // requests per second; 0: closed loop
	warmSlots uint64  // open loop: requests due before measure

	next atomic.Uint64 // open loop: the next request to send
	sent atomic.Uint64 // closed loop: measured requests claimed, for limit
}

// foreverish stands for "no time limit" (-duration 0 with -requests).
const foreverish = 100 * 365 * 24 * time.Hour

func newSchedule(start time.Time, warmup, duration time.Duration, limit uint64, rate float64) *schedule {
	if duration == 0 {
		duration = foreverish
	}
	s := &schedule{start: start, measure: start.Add(warmup), limit: limit, rate: rate}
	s.end = s.measure.Add(duration)
	if rate > 0 {
		s.warmSlots = uint64(math.Ceil(warmup.Seconds() * rate))
	}
	return s
}

// due is when open-loop request k is due. Computed from k rather than
// accumulated, so rounding never drifts.
func (s *schedule) due(k uint64) time.Time {
	return s.start.Add(time.Duration(float64(k) * 1e9 / s.rate))
}

// nextOpen claims the next open-loop request: its due time and whether it
// is measured; ok is false when the run has no more requests.
func (s *schedule) nextOpen() (due time.Time, measured, ok bool) {
	k := s.next.Add(1) - 1
	due = s.due(k)
	if !due.Before(s.end) || (s.limit > 0 && k >= s.warmSlots+s.limit) {
		return due, false, false
	}
	return due, k >= s.warmSlots, true
}

// claimClosed decides whether a closed-loop request starting at now is
// sent and measured.
func (s *schedule) claimClosed(now time.Time) (measured, ok bool) {
	if !now.Before(s.end) {
		return false, false
	}
	if now.Before(s.measure) {
		return false, true
	}
	if s.limit > 0 && s.sent.Add(1) > s.limit {
		return false, false
	}
	return true, true
}
