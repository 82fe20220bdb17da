package limiter

import "sync/atomic"

// breaker counts consecutive failed decision round trips and opens after
// threshold of them; it stays open until reset, which the service does when
// the mode returns to redis. Safe for concurrent use.
//
// It is not the coalescer's per-node breaker (redisstore's lane), which
// short-circuits one node's calls for a second and closes on its own after a
// probe: this one moves the whole service to local mode, and only the mode
// machine's health checks, over REDIS_RECOVER_AFTER, close it.
type breaker struct {
	threshold int64
	failures  atomic.Int64
	open      atomic.Bool
}

func newBreaker(threshold int) *breaker {
	if threshold <= 0 {
		threshold = 5
	}
	return &breaker{threshold: int64(threshold)}
}

// success records a round trip that answered.
func (b *breaker) success() {
	if b.failures.Load() != 0 { // no write, no contended cache line, when healthy
		b.failures.Store(0)
	}
}

// failure records a failed round trip and reports whether it opened the
// breaker (true once per opening).
func (b *breaker) failure() bool {
	if b.failures.Add(1) < b.threshold {
		return false
	}
	return b.open.CompareAndSwap(false, true)
}

// isOpen reports whether the breaker is open.
func (b *breaker) isOpen() bool { return b.open.Load() }

// reset closes the breaker.
func (b *breaker) reset() {
	b.failures.Store(0)
	b.open.Store(false)
}
