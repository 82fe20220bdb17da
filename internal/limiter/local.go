package limiter

import (
	"sync/atomic"
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
)

// sweepEvery bounds how long expired local state is kept.
const sweepEvery = 10 * time.Second

// defaultLocalMaxKeys bounds local-mode state unless configured otherwise:
// 23 to 40 MB of keys (docs/operations.md, local mode: 230 to 400 B a key).
const defaultLocalMaxKeys = 100_000

// localLimiter decides in process memory with the same model the Lua scripts
// implement, for rules whose failure policy is local while Redis is away.
type localLimiter struct {
	mem       *decide.Memory
	lastSweep atomic.Int64
}

// newLocalLimiter returns a local limiter holding at most about maxKeys
// keys: a flood of distinct subjects during a Redis outage evicts state
// rather than growing without bound.
func newLocalLimiter(maxKeys int) *localLimiter {
	return &localLimiter{mem: decide.NewBoundedMemory(maxKeys)}
}

// decide decides c in memory with each of its limits divided among
// instances, the live limiter instances, so together they admit about what
// the rule admits.
func (l *localLimiter) decide(c decide.Call, instances int64, now time.Time) decide.Result {
	if instances > 1 {
		c.Limits = divideLimits(c.Limits, instances)
	}
	ms := now.UnixMilli()
	if last := l.lastSweep.Load(); ms-last >= sweepEvery.Milliseconds() && l.lastSweep.CompareAndSwap(last, ms) {
		l.mem.Sweep(ms)
	}
	c.NowMs = 0
	return l.mem.Decide(c, ms)
}

// divideLimits returns a copy of limits with Requests, Rate and Burst divided
// by n, rounded down but at least 1 (0 stays 0: the field is unused).
func divideLimits(limits []decide.Limit, n int64) []decide.Limit {
	out := make([]decide.Limit, len(limits))
	for i, l := range limits {
		l.Requests, l.Rate, l.Burst = share(l.Requests, n), share(l.Rate, n), share(l.Burst, n)
		out[i] = l
	}
	return out
}

func share(v, n int64) int64 {
	if v == 0 {
		return 0
	}
	return max(1, v/n)
}
