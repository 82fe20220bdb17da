package redisstore

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden/internal/decide"
)

// countedGrace keeps a window's counter this long past the window's end, so
// that a limiter whose estimate of the server's clock lags a little (half a
// round trip, or a refresh late) still finds the window's count rather
// than a new counter.
const countedGrace = 1000 // ms

// maxExpirySpread bounds how much longer than the grace a counter may be
// kept (see expirySpread): long windows keep no more than a minute extra.
const maxExpirySpread = 60_000 // ms

// A counted call (decide.Call.Counted: a fixed window of one limit, without
// penalty or escalations) needs no script: its counter is a key of its own
// per window, <state key>:<per ms>:<window index>, and Redis decides it with
//
//	INCRBY <counter> <cost>
//	PEXPIRE <counter> <time left in the window + countedGrace + spread>
//
// the two commands envoyproxy/ratelimit sends per limit, at a fraction of
// a script's cost on the server (see README, Redis CPU per decision). The
// call is admitted when the count INCRBY answers is within the limit. A
// denied call takes its cost back (DECRBY, refund), so the count is that of
// the admitted calls, as the scripts and the model keep it; until the
// refund lands, a concurrent call of a larger cost than the room left may
// be denied that would have fit. A call that debits denied calls
// (decide.Call.DebitDenied) keeps its cost: envoyproxy/ratelimit's own
// INCRBY.
//
// The window comes from the call's NowMs, the server's time as the limiter
// estimates it (nodeClock): every limiter places a call in the same window
// without trusting its own wall clock.

// countedCall returns c as a counted call.
func countedCall(c *decide.Call) scriptCall {
	return scriptCall{counted: c}
}

// commands appends c's INCRBY and PEXPIRE to cmds, their arguments
// appended to arena (pointers into c, which outlives the round trip).
func (c *scriptCall) commands(ctx context.Context, arena *[]any, cmds []redis.Cmder) []redis.Cmder {
	per := c.counted.Limits[0].Per.Milliseconds()
	index, left := decide.CountedWindow(c.counted.NowMs, per)
	c.key = countedKey(c.counted.Keys.State, per, index)
	c.ttl = left + countedGrace + expirySpread(c.key, per)
	start := len(*arena)
	c.incrBy = c.counted.Cost
	if c.counted.Probe {
		c.incrBy = 0
	}
	*arena = append(*arena, "incrby", &c.key, &c.incrBy, "pexpire", &c.key, &c.ttl)
	a := (*arena)[start:len(*arena):len(*arena)]
	c.incr = redis.NewIntCmd(ctx, a[:3]...)
	return append(cmds, c.incr, redis.NewBoolCmd(ctx, a[3:]...))
}

// expirySpread returns how much longer than the grace the counter key of a
// window of per (ms) is kept: between 0 and per (at most maxExpirySpread),
// the same from every limiter (it derives from the key alone, by FNV-1a)
// and spread evenly across keys. Without it every counter of a window
// expires at the same instant, and Redis deletes them together in its one
// thread: with 10 000 clients on a 1 s window its expire cycle took 3 – 6 ms
// every second (LATENCY HISTORY expire-cycle), a stall every decision in
// flight waited out. Spread, the deletions come as steadily as the
// counters were created.
func expirySpread(key string, per int64) int64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= 1099511628211
	}
	return int64(h % uint64(min(per, maxExpirySpread)))
}

// countedKey returns the counter of the window index of per (ms) of the
// state key state: within the state key's hash tag on a cluster.
func countedKey(state string, per, index int64) string {
	var buf [128]byte // on the stack: the string is the one allocation
	b := append(buf[:0], state...)
	b = append(b, ':')
	b = strconv.AppendInt(b, per, 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, index, 10)
	return string(b)
}

// refund takes back the cost of the denied counted calls at the positions
// denied in one more round trip. The expiry is set again in case the
// counter expired in between (a round trip longer than countedGrace), so a
// refund never leaves a key without one. A refund that fails, or whose
// reply is lost, leaves the count high until the window ends: calls are
// denied, never admitted, for it.
func refund(ctx context.Context, client redis.UniversalClient, calls []scriptCall, denied []int) {
	pipe := client.Pipeline()
	for _, i := range denied {
		calls[i].queueRefund(ctx, pipe)
	}
	_, _ = pipe.Exec(ctx)
}

// queueRefund adds the refund of c, a queued counted call, to pipe, sent
// once: twice, it would take the cost back twice.
func (c *scriptCall) queueRefund(ctx context.Context, pipe redis.Pipeliner) {
	_ = pipe.Process(ctx, sentOnce{redis.NewIntCmd(ctx, "decrby", c.key, c.counted.Cost)})
	pipe.PExpire(ctx, c.key, time.Duration(c.ttl)*time.Millisecond)
}
