// Package lease keeps one limiter's leases on hot keys: the units of a
// key's budget Redis lent it (decide.Lease), which it admits requests from
// in memory, and what it must tell Redis next: units to ask for ahead of
// exhaustion, units spent to settle, units to give back when a key goes
// idle, is evicted, its rule changes, it is found past its limit or the
// limiter stops. It does no I/O: the limiter sends the calls it returns and
// hands back Redis's answers (Settle, Failed).
//
// A local lease never outlives its server deadline: it ends at the time the
// asking call was sent plus the time Redis said was left (Result.LeaseFor,
// counted from the end of the millisecond Redis read its clock in), which
// is never later than the deadline on the server's clock.
//
// A unit spent from a lease is settled with Redis at most once: a give-back
// carries only what no call out carries, and what a call whose answer was
// lost carried is never sent again (it may have run; if not, a token
// bucket counts the units as unspent until the lease's slot ends, which can
// only leave units unused).
//
// The lease of a rule that debits denied calls (decide.Call.DebitDenied) can
// find its key past its limit by a debit elsewhere; it is answered from
// only while Redis found the key within its limit in the last Revalidate,
// and Revoke ends it at once when the limiter learns of such a debit.
package lease

import (
	"hash/maphash"
	"slices"
	"sync"
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
)

// Config sets the table's bounds and pace; zero values take the defaults.
type Config struct {
	// Horizon is the traffic a lease is sized to cover: a key's lease
	// holds about the units this limiter admitted for it in the last
	// Horizon (default 50ms), at most the rule's bound. A key is hot, and
	// leases, once it was asked for HotUnits units within one Horizon.
	Horizon  time.Duration
	HotUnits int64
	// MaxKeys bounds the keys tracked (default 10 000); past it, the least
	// recently used key of a small sample is evicted and its lease given
	// back.
	MaxKeys int
	// Idle gives back the lease of a key not used for this long (default
	// 1s) and forgets the key.
	Idle time.Duration
	// RetryAfter is how long a key waits to ask again after a failed round
	// trip (default 100ms): a dead Redis is not asked on every request.
	RetryAfter time.Duration
	// Revalidate bounds how long the lease of a rule that debits denied
	// calls answers after the last call Redis found within the key's limit
	// was sent (default 1s); a renewal is due after half of it.
	Revalidate time.Duration
}

// WithDefaults returns c with its zero values replaced by the defaults.
func (c Config) WithDefaults() Config {
	c.defaults()
	return c
}

func (c *Config) defaults() {
	if c.Horizon <= 0 {
		c.Horizon = 50 * time.Millisecond
	}
	if c.HotUnits <= 0 {
		c.HotUnits = 2
	}
	if c.MaxKeys <= 0 {
		c.MaxKeys = 10_000
	}
	if c.Idle <= 0 {
		c.Idle = time.Second
	}
	if c.RetryAfter <= 0 {
		c.RetryAfter = 100 * time.Millisecond
	}
	if c.Revalidate <= 0 {
		c.Revalidate = time.Second
	}
}

const shardCount = 64

// Table is one limiter's leases, safe for concurrent use.
type Table struct {
	cfg      Config
	seed     maphash.Seed
	perShard int
	shards   [shardCount]shard
}

// Key names one lease: the call's state key and a fingerprint of its terms
// (its limits and debit rule, by value). Calls of one Redis key under other
// limits (another tier or schedule entry, a changed rule) hold leases of
// their own, so switching between them never strands units; a rule set
// recompiled with the same limits finds its leases. Two terms of one key
// that share a fingerprint never share a lease: the entry's own call is
// compared (see entry.serves), and the second gets none.
type Key struct {
	state string
	terms uint64
}

// KeyOf returns the key of c's lease.
func KeyOf(c *decide.Call) Key {
	h := uint64(len(c.Limits))
	if c.DebitDenied {
		h = ^h
	}
	for _, l := range c.Limits {
		h = mix(mix(mix(mix(h, uint64(l.Requests)), uint64(l.Rate)), uint64(l.Burst)), uint64(l.Per))
	}
	return Key{c.Keys.State, h}
}

// mix folds x into the fingerprint h.
func mix(h, x uint64) uint64 {
	h = (h ^ x) * 0x9e3779b97f4a7c15
	return h ^ h>>29
}

type shard struct {
	mu      sync.Mutex
	entries map[Key]*entry
	returns []decide.Call // leases of evicted and revoked keys, and late grants, to give back
}

// entry is one key: its lease, the answer it gives from it, and its heat.
type entry struct {
	call    decide.Call // the key's call, cost 0: what renewals and give-backs send
	bound   int64       // the most units the lease holds
	until   int64       // the lease's server deadline, which names it; 0: no lease
	expire  time.Time   // its local end
	left    int64       // units not spent
	spent   int64       // units spent that no call has carried to Redis yet
	sending int64       // units spent that the call out carries (Lease.Spent)
	checked time.Time   // when the last call Redis found within the key's limit was sent
	revoked time.Time   // when the key was last found past its limit: grants asked before are not spent
	noticed time.Time   // when Revoke last asked to tell the other limiters

	// The answer of a decision from the lease: Redis's last, with what the
	// lease holds added to remaining.
	index     int
	limit     int64
	remaining int64 // the key's units left after its last grant
	reset     time.Time

	tick, ticked, last int64 // units asked in the current Horizon (tick), and in the one before
	used               time.Time
	busy               bool      // a call asking for units is out
	retry              time.Time // no asking before this, after a failure
}

// New returns an empty table.
func New(cfg Config) *Table {
	cfg.defaults()
	t := &Table{cfg: cfg, seed: maphash.MakeSeed(), perShard: max(1, cfg.MaxKeys/shardCount)}
	for i := range t.shards {
		t.shards[i].entries = make(map[Key]*entry)
	}
	return t
}

// lock locks the shard of k and returns it, with k's entry (nil: none);
// the caller unlocks sh.mu.
func (t *Table) lock(k Key) (sh *shard, e *entry) {
	sh = t.shard(k.state)
	sh.mu.Lock()
	return sh, sh.entries[k]
}

// shard returns the shard of the keys of state, under every terms.
func (t *Table) shard(state string) *shard {
	return &t.shards[maphash.String(t.seed, state)%shardCount]
}

// Take answers c (a leased call) at now from its key's lease when the lease
// lasts and holds c.Cost units: the result and true. Otherwise c goes to
// Redis, and Ask may put a lease request on it. bound is the most units the
// key's lease may hold (the rule's). renew reports, on a hit, that the
// lease runs low: the caller should send Renewal's call soon.
func (t *Table) Take(c *decide.Call, bound int64, now time.Time) (r decide.Result, ok, renew bool) {
	k := KeyOf(c)
	sh, e := t.lock(k)
	defer sh.mu.Unlock()
	if e == nil {
		if len(sh.entries) >= t.perShard {
			t.evict(sh, now)
		}
		e = &entry{call: *c, bound: bound}
		e.call.Cost, e.call.Lease = 0, decide.Lease{}
		sh.entries[k] = e
	}
	if !e.serves(c) {
		return decide.Result{}, false, false
	}
	e.used = now
	t.heat(e, c.Cost, now)
	if e.until != 0 && !now.Before(e.expire) {
		e.end() // lapsed: its units count no more anywhere
	}
	// A call of cost 0 asks whether the key is within its limit: only a
	// lease holding units says so; an empty one may be empty because the
	// key is past it (denied calls debited), which Redis answers. So may a
	// full one of a rule that debits denied calls, once a debit elsewhere
	// passed the limit: it answers only while Redis vouched for the key
	// lately.
	stale := e.call.DebitDenied && now.Sub(e.checked) >= t.cfg.Revalidate
	if e.left < max(c.Cost, 1) || stale {
		return decide.Result{}, false, false
	}
	e.left -= c.Cost
	e.spent += c.Cost
	r = decide.Result{Allowed: true, LimitIndex: e.index, Limit: e.limit,
		Remaining: max(0, e.remaining+e.left), ResetAfter: max(0, e.reset.Sub(now))}
	due := e.left < t.size(e)/2 || (e.call.DebitDenied && now.Sub(e.checked) >= t.cfg.Revalidate/2)
	return r, true, due && !e.busy && !now.Before(e.retry)
}

// serves reports whether e is the lease of c's terms, which its key's
// fingerprint almost always says alone.
func (e *entry) serves(c *decide.Call) bool {
	return e.call.DebitDenied == c.DebitDenied && slices.Equal(e.call.Limits, c.Limits)
}

// Ask sets c.Lease to ask Redis for a lease on c's key, which Take could
// not serve, when the key is hot and no call asking for it is out; it
// reports whether it did. The caller must then pass Redis's answer to
// Settle, or the failure to Failed.
func (t *Table) Ask(c *decide.Call, now time.Time) bool {
	sh, e := t.lock(KeyOf(c))
	defer sh.mu.Unlock()
	if e == nil || !e.serves(c) || e.busy || !t.hot(e) || now.Before(e.retry) {
		return false
	}
	c.Lease = t.request(e)
	return true
}

// heat counts cost units asked of e at now, per Horizon.
func (t *Table) heat(e *entry, cost int64, now time.Time) {
	tick := now.UnixNano() / int64(t.cfg.Horizon)
	switch {
	case tick == e.tick:
	case tick == e.tick+1:
		e.tick, e.last, e.ticked = tick, e.ticked, 0
	default:
		e.tick, e.last, e.ticked = tick, 0, 0
	}
	e.ticked += max(cost, 1)
}

// hot reports whether e's key was asked for enough units lately to lease.
func (t *Table) hot(e *entry) bool {
	return max(e.last, e.ticked) >= t.cfg.HotUnits
}

// size is the units a lease of e should hold: a Horizon of its traffic, at
// most its bound.
func (t *Table) size(e *entry) int64 {
	return min(max(e.last, e.ticked, 1), e.bound)
}

// request marks a call asking for e's lease out and returns what it asks:
// a lease's size more, so a renewal due below half a size lasts a horizon,
// with at most bound held (nothing more when it holds that: the call only
// has Redis vouch for the key), at least a unit when it holds none; and the
// settlement of what e's lease spent, which the call now carries alone. The
// lease is never zero: Settle or Failed must follow.
func (t *Table) request(e *entry) decide.Lease {
	e.busy = true
	e.sending, e.spent = e.spent, 0
	ask := max(0, min(t.size(e), e.bound-e.left))
	if e.left == 0 {
		ask = max(ask, 1)
	}
	return decide.Lease{Ask: ask, Until: e.until, Spent: e.sending}
}

// end empties e's lease. What the call out carries stays its own.
func (e *entry) end() {
	e.until, e.expire, e.left, e.spent = 0, time.Time{}, 0, 0
}

// Renewal returns the call that asks Redis for more units of key's lease
// (cost 0) and settles what it spent, and marks it out; false when there
// is nothing to ask (the key is gone, or a call is out already). Settle or
// Failed must follow a true.
func (t *Table) Renewal(key Key, now time.Time) (decide.Call, bool) {
	sh, e := t.lock(key)
	defer sh.mu.Unlock()
	if e == nil || e.busy || now.Before(e.retry) {
		return decide.Call{}, false
	}
	c := e.call
	c.Lease = t.request(e)
	return c, true
}

// Settle records Redis's answer r to c, a call Ask or Renewal made (its
// Lease is not zero), sent at sent.
func (t *Table) Settle(c *decide.Call, r decide.Result, sent time.Time) {
	sh, e := t.lock(KeyOf(c))
	defer sh.mu.Unlock()
	if e == nil || !e.serves(c) {
		return // dropped meanwhile: what was granted lapses with its deadline
	}
	e.busy, e.sending = false, 0
	if sent.Before(e.revoked) { // asked before the key was found past its limit
		if r.Granted > 0 {
			t.queueReturn(sh, e.call, decide.Lease{Until: r.LeaseUntil, Unspent: r.Granted})
		}
		return
	}
	if r.Allowed {
		e.checked = sent
	}
	if r.Granted == 0 {
		return
	}
	if r.LeaseUntil != e.until { // a new lease, or a new window or slot: the old lease is over
		e.end()
		e.until, e.expire = r.LeaseUntil, sent.Add(r.LeaseFor)
	}
	e.left += r.Granted
	e.index, e.limit, e.remaining = r.LimitIndex, r.Limit, r.Remaining-r.Granted
	e.reset = sent.Add(r.ResetAfter)
}

// Failed records that c, a call Ask or Renewal made, got no answer at now:
// the key asks again after RetryAfter. The units it carried as spent are
// not sent again: it may have run.
func (t *Table) Failed(c *decide.Call, now time.Time) {
	sh, e := t.lock(KeyOf(c))
	defer sh.mu.Unlock()
	if e != nil && e.serves(c) {
		e.busy, e.sending = false, 0
		e.retry = now.Add(t.cfg.RetryAfter)
	}
}

// Stats returns the keys tracked and the units held in leases.
func (t *Table) Stats() (keys int, units int64) {
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		keys += len(sh.entries)
		for _, e := range sh.entries {
			units += e.left
		}
		sh.mu.Unlock()
	}
	return keys, units
}
