package decide

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratewarden/ratewarden/internal/evict"
)

const shardCount = 64

// Memory is the reference model of the Lua scripts: it keeps, per Redis key,
// what the scripts keep in Redis, with the same expiry, and decides exactly
// as they do. It is safe for concurrent use; keys are sharded by their hash
// tag, so the three keys of one call share a lock. It also serves as the
// in-memory limiter when Redis is unavailable; call Sweep periodically to drop
// expired state. The zero value is ready to use; a Memory must not be copied
// after first use.
type Memory struct {
	shards    [shardCount]shard
	evictions atomic.Int64
}

type shard struct {
	mu   sync.Mutex
	keys map[string]*entry
	max  int // keys the shard may hold; 0: no bound
}

// callKeys is the most keys one call creates: state, hold and hits.
const callKeys = 3

// entry is one Redis key. Which fields are used depends on the key's role.
type entry struct {
	expireAt int64 // ms; the key is gone once now >= expireAt
	hold     int64 // hold key: denied until (ms)
	// holdRetry: the hold key's time a call is admitted again (ms), when
	// later than hold (the limits deny past the hold's end).
	holdRetry int64
	fields    []field // window counter or bucket hash, one per distinct per
	spans     []span  // sliding window log, ascending scores
	log       []run   // escalation hits, ascending scores
	lease     leaseState
	holds     *holdSet // concurrency: the holds and their lapse
	// reservation record (reserve.go): the units reserved and the time
	// the take was decided at; it lapses at expireAt.
	reserved, reservedAt int64
}

// field holds the hash fields of one per_ms: s and c for the fixed window
// (a, b), s, c and p for the sliding window counter (a, b, c), t, r and u for
// the token bucket (a, b, c).
type field struct {
	per, a, b, c int64
}

// NewMemory returns an empty model.
func NewMemory() *Memory {
	return &Memory{}
}

// NewBoundedMemory returns an empty model that holds at most about maxKeys
// keys (rounded up to a multiple of the shard count, at least callKeys a
// shard). When a call may need room, it first evicts keys (evict.Sampled):
// the expired keys of a small sample, else the one that would expire
// soonest.
// That is the state Redis would forget first, so losing it changes the
// fewest later decisions: a token bucket's key expires when it is full
// again, so the least used bucket goes first, and a penalty goes only when
// it is about to end anyway.
func NewBoundedMemory(maxKeys int) *Memory {
	m := &Memory{}
	per := max((maxKeys+shardCount-1)/shardCount, callKeys)
	for i := range m.shards {
		m.shards[i].max = per
	}
	return m
}

// Evictions returns how many keys were evicted to stay within the bound.
func (m *Memory) Evictions() int64 { return m.evictions.Load() }

// Decide decides c at nowMs, or at c.NowMs when that is non-zero (as the
// scripts do), and records the outcome; the result's At is that time. c
// must be valid (see Call.Validate).
func (m *Memory) Decide(c Call, nowMs int64) Result {
	if c.NowMs != 0 {
		nowMs = c.NowMs
	}
	sh := &m.shards[shardOf(c.Keys.State)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.keys == nil {
		sh.keys = make(map[string]*entry)
	}
	if sh.max > 0 {
		for len(sh.keys) > sh.max-callKeys {
			m.evictions.Add(int64(evict.Sampled(sh.keys, nowMs, func(e *entry) int64 { return e.expireAt })))
		}
	}
	var r Result
	switch {
	case c.Algorithm == Concurrency:
		r = sh.concurrency(c, nowMs)
	case c.Leased:
		r = sh.leased(c, nowMs)
	case c.reserves():
		r = sh.reservation(c, nowMs)
	default:
		r = sh.decide(c, nowMs)
	}
	r.At = nowMs
	return r
}

// Sweep drops every key whose Redis TTL would have run out by nowMs.
func (m *Memory) Sweep(nowMs int64) {
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		for k, e := range sh.keys {
			if nowMs >= e.expireAt {
				delete(sh.keys, k)
			}
		}
		sh.mu.Unlock()
	}
}

// Len returns the number of keys held, expired or not.
func (m *Memory) Len() int {
	n := 0
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		n += len(sh.keys)
		sh.mu.Unlock()
	}
	return n
}

// shardOf hashes the Redis Cluster hash tag of key (the whole key when it has
// none), so all keys of a call land in one shard.
func shardOf(key string) uint32 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	return h % shardCount
}

// get returns the entry of key, or nil. An entry past its expiry is still
// returned until Sweep drops it, like a key Redis has not reclaimed yet: the
// scripts set TTLs so that expired state decides exactly as absent state
// while the clock moves forward, and when the clock goes back past an expiry
// the stale state is the better answer (a hold until H still covers times
// before H).
func (sh *shard) get(key string) *entry {
	return sh.keys[key]
}

// create returns the entry of key, adding an empty one when absent.
func (sh *shard) create(key string) *entry {
	e := sh.keys[key]
	if e == nil {
		e = &entry{}
		sh.keys[key] = e
	}
	return e
}

// outcome is what one limit says about a call.
type outcome struct {
	quota, remaining, reset, retry int64 // ms for reset and retry
	deny                           bool
}

// decide mirrors decide() in lua/prelude.lua.
func (sh *shard) decide(c Call, now int64) Result {
	var hold *entry
	if c.Penalty > 0 || len(c.Escalations) > 0 {
		hold = sh.get(c.Keys.Hold)
		if hold != nil && now < hold.hold {
			var q int64
			if len(c.Limits) > 0 {
				q = quota(c.Algorithm, c.Limits[0])
			}
			wait := ms(max(hold.hold, hold.holdRetry) - now)
			return Result{Held: true, LimitIndex: -1, Limit: q, ResetAfter: wait, RetryAfter: wait}
		}
	}
	if len(c.Limits) == 0 {
		return Result{Allowed: true, LimitIndex: -1}
	}

	var buf [8]outcome
	outs := buf[:0]
	if len(c.Limits) > len(buf) {
		outs = make([]outcome, 0, len(c.Limits))
	}
	var admitted bool
	switch c.Algorithm {
	case FixedWindow:
		outs, admitted = sh.fixedWindow(c, now, outs)
	case SlidingWindow:
		outs, admitted = sh.slidingWindow(c, now, outs)
	case SlidingWindowCounter:
		outs, admitted = sh.slidingWindowCounter(c, now, outs)
	default:
		outs, admitted = sh.tokenBucket(c, now, outs)
	}

	b := binding(outs, admitted)
	o := outs[b]
	var extra int64
	if !admitted {
		var cand int64
		if c.Penalty > 0 {
			cand = now + c.Penalty.Milliseconds()
		}
		if len(c.Escalations) > 0 {
			cand = sh.recordHit(c, now, cand)
		}
		if cand > now {
			if hold == nil || hold.hold < cand {
				h := sh.create(c.Keys.Hold)
				h.hold, h.holdRetry, h.expireAt = cand, now+o.retry, cand
			}
			extra = cand - now
		}
	}

	return Result{
		Allowed:    admitted,
		LimitIndex: b,
		Limit:      o.quota,
		Remaining:  max(o.remaining, 0),
		ResetAfter: ms(max(o.reset, extra)),
		RetryAfter: ms(max(o.retry, extra)),
	}
}

// recordHit mirrors record_hit in lua/prelude.lua.
func (sh *shard) recordHit(c Call, now, cand int64) int64 {
	maxTriggers, maxWithin := int64(1), int64(0)
	for _, e := range c.Escalations {
		maxTriggers = max(maxTriggers, e.Triggers)
		maxWithin = max(maxWithin, e.Within.Milliseconds())
	}
	h := sh.create(c.Keys.Hits)
	h.log = insertRun(h.log, now, 1)
	h.log = keepNewest(h.log, maxTriggers)
	h.expireAt = h.log[len(h.log)-1].score + maxWithin + 1
	for _, e := range c.Escalations {
		if countFrom(h.log, now-e.Within.Milliseconds()) >= e.Triggers {
			cand = max(cand, now+e.Penalty.Milliseconds())
		}
	}
	return cand
}

// binding mirrors binding() in lua/common.lua.
func binding(outs []outcome, admitted bool) int {
	b := -1
	for i, o := range outs {
		if admitted {
			if b < 0 || o.remaining < outs[b].remaining {
				b = i
			}
		} else if o.deny && (b < 0 || o.retry > outs[b].retry) {
			b = i
		}
	}
	return b
}

func ms(n int64) time.Duration {
	return time.Duration(n) * time.Millisecond
}
