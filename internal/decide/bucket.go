package decide

// fillTime is the ms until a bucket of limit l holding t milli-tokens with
// refill remainder r is full.
func fillTime(l Limit, t, r int64) int64 {
	if t >= l.Burst*1000 {
		return 0
	}
	return ceilDiv((l.Burst*1000-t)*l.Per.Milliseconds()-r, l.Rate*1000)
}

// refill returns the milli-tokens and remainder of a bucket of limit l
// elapsed ms (none when negative: the clock went back) after it held t and
// r, as refill in lua/token_bucket.lua.
func refill(l Limit, t, r, elapsed int64) (int64, int64) {
	elapsed = max(0, elapsed)
	if elapsed >= fillTime(l, t, r) {
		return l.Burst * 1000, 0
	}
	q, r := divmod(elapsed*l.Rate*1000+r, l.Per.Milliseconds())
	return t + q, r
}

// refillUntil refills every stored bucket of c's limits last updated
// before at up to at, under limits (the bursts lowered by the leases that
// lapsed at at), as alg.refill_until in lua/token_bucket.lua.
func (sh *shard) refillUntil(c Call, at int64, limits []Limit) {
	e := sh.get(c.Keys.State)
	for _, l := range limits {
		if i := e.fieldOf(l.Per.Milliseconds()); i >= 0 && e.fields[i].c < at {
			f := &e.fields[i]
			f.a, f.b = refill(l, f.a, f.b, at-f.c)
			f.c = at
		}
	}
}

// minTokens is the lowest a bucket of limit l goes in debt (Call.DebitDenied):
// from there its refill time, (full - t) * per, is MaxUsage at most.
func minTokens(l Limit) int64 {
	return l.Burst*1000 - MaxUsage/l.Per.Milliseconds()
}

// tokenBucket mirrors lua/token_bucket.lua. Field a is milli-tokens, b the
// refill remainder, c the last update.
func (sh *shard) tokenBucket(c Call, now int64, outs []outcome) ([]outcome, bool) {
	e := sh.get(c.Keys.State)
	admitted := true
	var stateBuf [8]field
	state := stateBuf[:0]
	for _, l := range c.Limits {
		per := l.Per.Milliseconds()
		f := field{per: per, a: l.Burst * 1000, c: now}
		if i := e.fieldOf(per); i >= 0 {
			f = e.fields[i]
		}
		f.a, f.b = refill(l, f.a, f.b, now-f.c)
		f.c = max(f.c, now)
		state = append(state, f)
		deny := f.a < c.Cost*1000
		admitted = admitted && !deny
		outs = append(outs, outcome{quota: l.Burst, deny: deny})
	}
	ttl := int64(1)
	debit := c.debits(admitted)
	for i, l := range c.Limits {
		f := &state[i]
		if debit {
			f.a = max(f.a-c.Cost*1000, minTokens(l))
		}
		o := &outs[i]
		o.remaining, _ = divmod(f.a, 1000)
		o.reset = fillTime(l, f.a, f.b)
		if o.deny {
			if c.Cost > l.Burst {
				o.retry = f.per
			} else {
				o.retry = ceilDiv((c.Cost*1000-f.a)*f.per-f.b, l.Rate*1000)
			}
		}
		ttl = max(ttl, f.c+o.reset+1-now)
	}
	if debit {
		sh.setFields(c.Keys.State, state, now+ttl)
	}
	return outs, admitted
}
