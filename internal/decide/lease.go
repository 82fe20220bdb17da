package decide

// Leases let a limiter answer calls of a hot key from memory: a leased call
// (Call.Leased) decides its cost as the rule's algorithm does and, when
// admitted, lends the caller up to Lease.Ask more units, debited from the
// key at once, as if admitted now. The caller admits requests from them
// until the lease's deadline, without a round trip, and gives back what it
// did not spend. Because every unit is debited in Redis before a limiter
// admits anything with it, the units admitted across all limiters never
// pass the limit (see docs/leases.md for the argument per algorithm):
//
//   - fixed window and sliding window counter: a lease ends with the
//     earliest window of the key's limits (on the server's clock, as the
//     windows turn: see leaseFor). A unit spent later in its window
//     than it was debited changes nothing for a fixed window; for the
//     counter, the previous window's weight only falls while the window
//     runs, so a debit admitted at grant time is admitted at any later
//     moment of the window.
//   - token bucket: units taken early must not let the bucket refill past
//     its burst meanwhile. The key counts the units it lent that may still
//     be unspent (outstanding, fields lo and ld) and its buckets refill only
//     up to burst minus them. Leases end with the LeaseSlot in which they
//     were granted, when the outstanding count is forgotten; the holder
//     settles the units it spent (Lease.Spent) as it renews, so the cap
//     stays near the burst. The first call after a slot brings the buckets
//     to its end under the cap, so the room the lapsed leases held fills
//     at the rate from then on, not at once.
//
// A grant is at most half of what the key has left after the call, so the
// last units go one call at a time and one limiter cannot strand the rest.

// LeaseSlot is the ms a token bucket's leases may last: they end with the
// slot of LeaseSlot ms, aligned on the server's clock, they were granted in.
const LeaseSlot = 5000

// Lease is what a leased call asks of its key besides deciding its cost.
// Until names the lease the caller holds on the key (Result.LeaseUntil of
// its grant; 0: none), which Spent and Unspent concern: they are applied
// only while it lasts, and for a token bucket only if it is the key's
// current one, so a late give-back never credits a later window.
type Lease struct {
	// Ask is the most units to lend beyond the call's cost; 0: none.
	Ask int64
	// Until is the deadline (server ms) of the lease the caller holds.
	Until int64
	// Spent is the units of that lease admitted since the caller last
	// settled it (token bucket: they stop counting as outstanding).
	Spent int64
	// Unspent is the units of that lease the caller gives back.
	Unspent int64
}

// leaseState is the outstanding count of a key's token-bucket leases, the
// hash fields lo and ld of its state key (see lua/lease.lua).
type leaseState struct {
	out   int64 // units lent that may be unspent
	until int64 // the slot end (ms) they count until
}

// leased mirrors decide() in lua/lease.lua: give back and settle what
// c.Lease says of the caller's lease, decide c's cost, then lend.
func (sh *shard) leased(c Call, now int64) Result {
	bucket := c.Algorithm == TokenBucket
	var ls leaseState
	if e := sh.get(c.Keys.State); bucket && e != nil && now < e.lease.until {
		ls = e.lease
	} else if bucket && e != nil && e.lease.until != 0 {
		// The slot's leases lapsed: until its end the buckets filled under
		// the cap they held.
		if e.lease.out > 0 {
			sh.refillUntil(c, e.lease.until, capped(c, e.lease.out, 0).Limits)
		}
		e.lease = leaseState{}
	}
	l := c.Lease
	settle := l.Until > 0 && now < l.Until && (!bucket || l.Until == ls.until)
	if settle && !bucket && l.Unspent > 0 {
		sh.giveBack(c, l.Unspent)
	}

	// The lease's deadline: the earliest window's end, or the bucket's
	// slot's. Nothing is lent that could not be spent before it (leaseFor).
	until := windowsEnd(c, now)
	if bucket {
		until = ls.until
		if until == 0 {
			until = now - mod(now, LeaseSlot) + LeaseSlot
		}
	}
	var granted int64
	if l.Ask > 0 && leaseFor(until, now) > 0 { // what the call would leave, read without writing, sizes the grant
		probe := capped(c, ls.out, c.Cost)
		probe.Probe = true
		if outs, admitted := sh.evaluate(probe, now); admitted {
			room := outs[0].remaining
			for _, o := range outs[1:] {
				room = min(room, o.remaining)
			}
			granted = min(l.Ask, (room-c.Cost)/2)
		}
	}
	final := capped(c, ls.out, c.Cost+granted) // the cap in force until now
	outs, admitted := sh.evaluate(final, now)
	wrote := final.debits(admitted)
	for i := range outs {
		outs[i].remaining += granted // the call's own answer: the grant is the caller's
	}
	if bucket {
		// Settled once the buckets hold their refill to now under the old
		// cap (written above): a cap raised earlier would refill the past
		// above it.
		cappedOut := ls.out
		if settle && wrote {
			ls.out = max(0, ls.out-l.Spent-l.Unspent)
		}
		ls.until = until
		ls.out += granted
		if wrote {
			if settle {
				sh.addTokens(c, l.Unspent, ls.out)
			}
			e := sh.create(c.Keys.State)
			e.lease = ls
			if ls.out == 0 {
				e.lease = leaseState{}
			}
			if ls.out > 0 || cappedOut > 0 { // else the algorithm's expiry holds
				ttl := leaseTTL(c, e.expireAt-now, cappedOut)
				if ls.out > 0 { // while it counts, until the slot's end and the refill of its room
					ttl = max(ttl, leaseTTL(c, ls.until-now, ls.out))
				}
				e.expireAt = now + ttl
			}
		}
	}

	b := binding(outs, admitted)
	o := outs[b]
	r := Result{
		Allowed:    admitted,
		LimitIndex: b,
		Limit:      quota(c.Algorithm, c.Limits[b]),
		Remaining:  max(o.remaining, 0),
		ResetAfter: ms(o.reset),
		RetryAfter: ms(o.retry),
		Granted:    granted,
	}
	if granted > 0 {
		r.LeaseUntil, r.LeaseFor = until, ms(leaseFor(until, now))
	}
	return r
}

// leaseFor is the ms a lease of deadline until, granted at now, may be
// spent for, counted from when the caller sent its call: until less the end
// of now's millisecond. The server reads its clock to the millisecond, so
// the instant of the grant may lie anywhere in the millisecond now; counted
// from its start, a lease could be spent up to a millisecond into the next
// window, which admits its full limit.
func leaseFor(until, now int64) int64 {
	return until - now - 1
}

// evaluate runs c's algorithm at now (c has no penalty or escalations).
func (sh *shard) evaluate(c Call, now int64) ([]outcome, bool) {
	outs := make([]outcome, 0, len(c.Limits))
	switch c.Algorithm {
	case FixedWindow:
		return sh.fixedWindow(c, now, outs)
	case SlidingWindowCounter:
		return sh.slidingWindowCounter(c, now, outs)
	}
	return sh.tokenBucket(c, now, outs)
}

// capped returns c costing cost, its buckets' burst lowered by the out
// units its leases may still hold (at least 1), as alg.capped does in
// lua/token_bucket.lua; window calls only change cost.
func capped(c Call, out, cost int64) Call {
	c.Cost = cost
	if c.Algorithm != TokenBucket || out == 0 {
		return c
	}
	limits := make([]Limit, len(c.Limits))
	for i, l := range c.Limits {
		l.Burst = max(1, l.Burst-out)
		limits[i] = l
	}
	c.Limits = limits
	return c
}

// giveBack takes units back off the current window's count of each limit
// (fixed window and counter), as give_back in lua/lease.lua. The key is
// still in the window the units were lent in: a lease ends with it.
func (sh *shard) giveBack(c Call, units int64) {
	e := sh.get(c.Keys.State)
	for _, l := range c.Limits {
		if i := e.fieldOf(l.Per.Milliseconds()); i >= 0 {
			e.fields[i].b = max(0, e.fields[i].b-units)
		}
	}
}

// addTokens puts units back in each stored bucket of c, up to its burst
// lowered by out, as alg.add_tokens in lua/token_bucket.lua. The call's
// write just refilled the buckets to now: the tokens add to what they hold
// now.
func (sh *shard) addTokens(c Call, units, out int64) {
	if units == 0 {
		return
	}
	e := sh.get(c.Keys.State)
	for _, l := range c.Limits {
		if i := e.fieldOf(l.Per.Milliseconds()); i >= 0 {
			e.fields[i].a = min(e.fields[i].a+units*1000, (l.Burst-out)*1000)
		}
	}
}

// windowsEnd is the end (ms) of the earliest window of c's limits at now:
// the deadline of a window lease. A window stored later than now's (the
// clock went back) ends later, so this is never late.
func windowsEnd(c Call, now int64) int64 {
	end := int64(-1)
	for _, l := range c.Limits {
		per := l.Per.Milliseconds()
		if e := now - mod(now, per) + per; end < 0 || e < end {
			end = e
		}
	}
	return end
}

// leaseTTL is alg.lease_ttl in lua/token_bucket.lua: at least the ms until
// every bucket of c is full at its real burst, given ttl, the expiry the
// algorithm set under the burst lowered by out.
func leaseTTL(c Call, ttl, out int64) int64 {
	var most int64
	for _, l := range c.Limits {
		most = max(most, ceilDiv(out*l.Per.Milliseconds(), l.Rate)+1)
	}
	return ttl + most
}

func mod(a, b int64) int64 {
	_, r := divmod(a, b)
	return r
}
