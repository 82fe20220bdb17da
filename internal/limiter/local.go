package limiter

import (
	"sync/atomic"
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
)

// sweepEvery bounds how long expired local state is kept.
const sweepEvery = 10 * time.Second

// localLimiter decides in process memory with the same model the Lua scripts
// implement, for rules whose failure policy is local while Redis is away.
type localLimiter struct {
	mem       *decide.Memory
	lastSweep atomic.Int64
}

func newLocalLimiter() *localLimiter { return &localLimiter{mem: decide.NewMemory()} }

func (l *localLimiter) decide(c decide.Call, now time.Time) decide.Result {
	ms := now.UnixMilli()
	if last := l.lastSweep.Load(); ms-last >= sweepEvery.Milliseconds() && l.lastSweep.CompareAndSwap(last, ms) {
		l.mem.Sweep(ms)
	}
	c.NowMs = 0
	return l.mem.Decide(c, ms)
}
