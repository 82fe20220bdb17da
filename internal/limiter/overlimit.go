package limiter

import (
	"hash/maphash"
	"sync"
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/evict"
)

const overLimitShards = 64

// overLimitCache remembers the keys Redis has just denied, each until the
// time Redis said a request could next be admitted, so a client hammering a
// limit it already exceeded is answered from memory, without a round trip.
// Only denials are cached, and only those that Redis would repeat without
// changing any state until they expire, so every answer it gives is the one
// Redis would have given:
//
//   - a limit denial counts nothing in any algorithm's script, and a hold
//     (penalty or escalation) is read, never extended, while it lasts;
//   - a limit denial of a rule with a penalty or escalations is not cached:
//     Redis renews the penalty or records a hit toward the next escalation.
//     The hold that follows is;
//   - an entry serves only calls with the same limits (the compiled slice, so
//     a tier or schedule with other limits misses; a rules change carries
//     the entry onto the new rules' equal limits, see carry) and the cost
//     it was denied for: a cheaper request may fit sooner, a costlier one
//     later;
//   - its expiry counts from the time the request started, before the round
//     trip, so it lapses early rather than late;
//   - an admission of the key on this instance drops its entry.
//
// Admissions of the key on other instances can only deepen a denial (every
// algorithm's usage only grows until time replenishes it), so the verdict
// stays right; the remaining count and retry time it reports are then those
// of the first denial, possibly optimistic, never a wrong allow or deny.
// A give-back (of any instance: see redisstore.LateError) does lower a
// count: what Redis counted for requests refused because its reply came
// late; so does the settle of a reservation that cost less than its
// estimate (one settled here drops the key's entry at once, like an
// admission). So a limit denial is served for overLimitRecheck at most, then
// Redis is asked again: a denial that those units would have turned into
// an admission stands for a second, not until the window ends. (A hold is
// never given back.)
//
// Memory is bounded: each of 64 shards holds at most size/64 entries; a full
// shard drops an entry of a small random sample (see evict.Sampled).
type overLimitCache struct {
	seed     maphash.Seed
	perShard int
	shards   [overLimitShards]overLimitShard
}

type overLimitShard struct {
	mu      sync.Mutex
	entries map[string]overLimitEntry
}

type overLimitEntry struct {
	limits  []decide.Limit // the compiled limits it was denied under, by identity
	cost    int64
	stored  time.Time
	until   time.Time // the retry time Redis gave
	recheck time.Time // when Redis is asked again: until, or overLimitRecheck after stored
	result  decide.Result
}

// overLimitRecheck is the longest an entry is served: a hot key past its
// limit costs one round trip a second per limiter.
const overLimitRecheck = time.Second

// newOverLimitCache returns a cache of about size entries, or nil (no cache)
// when size is zero or less.
func newOverLimitCache(size int) *overLimitCache {
	if size <= 0 {
		return nil
	}
	c := &overLimitCache{seed: maphash.MakeSeed(), perShard: max(1, size/overLimitShards)}
	for i := range c.shards {
		c.shards[i].entries = make(map[string]overLimitEntry)
	}
	return c
}

func (c *overLimitCache) shard(key string) *overLimitShard {
	return &c.shards[maphash.String(c.seed, key)%overLimitShards]
}

// get returns the denial cached for call at now, with its times counted from
// now, and whether there is one.
func (c *overLimitCache) get(call *decide.Call, now time.Time) (decide.Result, bool) {
	// A call that debits denied calls must reach Redis whatever is cached:
	// a report of a rule spent by reports shares its key with the probes
	// whose denials are cached.
	if c == nil || len(call.Limits) == 0 || call.DebitDenied || call.Algorithm == decide.Concurrency {
		return decide.Result{}, false
	}
	sh := c.shard(call.Keys.State)
	sh.mu.Lock()
	e, ok := sh.entries[call.Keys.State]
	if ok && !now.Before(e.recheck) {
		delete(sh.entries, call.Keys.State)
		ok = false
	}
	sh.mu.Unlock()
	if !ok || &e.limits[0] != &call.Limits[0] || call.Cost != e.cost {
		return decide.Result{}, false
	}
	r := e.result
	r.RetryAfter = e.until.Sub(now)
	r.ResetAfter = max(r.RetryAfter, r.ResetAfter-now.Sub(e.stored))
	return r, true
}

// put caches r, Redis's answer to call for a request that started at start,
// when it is a denial Redis would repeat unchanged until it expires. Not
// a denial that debits its cost (decide.Call.DebitDenied): answered from
// here, the debits would be lost. An admission drops the key's entry: a
// cheaper request fitted, so the entry's remaining count is stale.
func (c *overLimitCache) put(call *decide.Call, r decide.Result, start time.Time) {
	// A full key of a concurrency rule frees a slot as soon as any hold
	// is released: its denial is never cached.
	if c == nil || call.Algorithm == decide.Concurrency {
		return
	}
	if r.Allowed {
		if call.Cost > 0 || r.Refunded > 0 { // an admission, or a settle that gave units back
			sh := c.shard(call.Keys.State)
			sh.mu.Lock()
			delete(sh.entries, call.Keys.State)
			sh.mu.Unlock()
		}
		return
	}
	if r.RetryAfter <= 0 || call.Cost <= 0 || call.DebitDenied || call.NowMs != 0 || len(call.Limits) == 0 ||
		(!r.Held && (call.Penalty > 0 || len(call.Escalations) > 0)) {
		return
	}
	e := overLimitEntry{limits: call.Limits, cost: call.Cost, stored: start, until: start.Add(r.RetryAfter), result: r}
	e.recheck = e.until
	if !r.Held { // a hold is never given back
		e.recheck = start.Add(min(r.RetryAfter, overLimitRecheck))
	}
	sh := c.shard(call.Keys.State)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if _, ok := sh.entries[call.Keys.State]; !ok && len(sh.entries) >= c.perShard {
		evict.Sampled(sh.entries, start.UnixNano(), func(e overLimitEntry) int64 { return e.recheck.UnixNano() })
	}
	sh.entries[call.Keys.State] = e
}

// carry moves the entries whose calls the new rules decide alike onto
// their limits (carry, see rules.Set.Carry) and forgets the others, so that
// a raised limit admits at once; it returns how many it kept and dropped.
// An entry a request of the old rules puts afterwards serves none of the
// new rules' calls: its limits are the old ones.
func (c *overLimitCache) carry(carry func(state string, limits []decide.Limit) ([]decide.Limit, bool)) (kept, dropped int) {
	if c == nil {
		return 0, 0
	}
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		for key, e := range sh.entries {
			if limits, ok := carry(key, e.limits); ok {
				e.limits = limits
				sh.entries[key] = e
				kept++
			} else {
				delete(sh.entries, key)
				dropped++
			}
		}
		sh.mu.Unlock()
	}
	return kept, dropped
}

// len returns the number of entries held, expired or not.
func (c *overLimitCache) len() int {
	if c == nil {
		return 0
	}
	n := 0
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		n += len(sh.entries)
		sh.mu.Unlock()
	}
	return n
}
