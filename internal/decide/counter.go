package decide

// counterRetry is the ms from now until a call of cost that limit l denied
// would be admitted if nothing else is, given the current window's start and
// its counts after the call (which debited them or not); it mirrors retry_after in
// lua/sliding_window_counter.lua. The estimate never rises while nothing is
// admitted, so the first admissible time is the first of: later in the
// current window (the previous window's weight decays), in the next window
// (curr becomes prev), or two windows on (both counts are 0).
func counterRetry(l Limit, now, start, prev, curr, cost int64) int64 {
	per := l.Per.Milliseconds()
	if cost > l.Requests {
		return per
	}
	if curr+cost <= l.Requests && prev > 0 {
		if k, _ := divmod((l.Requests-curr-cost)*per, prev); k >= 1 {
			return start + per - k - now
		}
	}
	wait := per
	if curr == 0 {
		wait = 0
	} else if k, _ := divmod((l.Requests-cost)*per, curr); k >= 1 {
		wait = max(0, per-k)
	}
	return start + per + wait - now
}

// slidingWindowCounter mirrors lua/sliding_window_counter.lua. Field a is the
// start of the current window, b its count, c the previous window's count.
func (sh *shard) slidingWindowCounter(c Call, now int64, outs []outcome) ([]outcome, bool) {
	e := sh.get(c.Keys.State)
	admitted := true
	var stateBuf [8]field
	state := stateBuf[:0]
	var weightBuf [8]int64
	weights := weightBuf[:0]
	for _, l := range c.Limits {
		per := l.Per.Milliseconds()
		_, off := divmod(now, per)
		f := field{per: per, a: now - off}
		if i := e.fieldOf(per); i >= 0 {
			switch s := e.fields[i]; {
			case s.a >= f.a: // this window, or a later one when the clock went back
				f = s
			case s.a >= f.a-per: // the window before: it rolls over
				f.c = s.b
			}
		}
		w := per - max(0, now-f.a)
		state, weights = append(state, f), append(weights, w)
		deny := f.b+c.Cost > l.Requests || f.c*w > (l.Requests-f.b-c.Cost)*per
		admitted = admitted && !deny
		outs = append(outs, outcome{quota: l.Requests, deny: deny})
	}
	var ttl int64
	debit := c.debits(admitted)
	for i, l := range c.Limits {
		f := &state[i]
		if debit {
			f.b = cappedAdd(f.b, c.Cost, MaxUsage/f.per)
		}
		o := &outs[i]
		o.remaining = l.Requests - f.b - ceilDiv(f.c*weights[i], f.per)
		switch {
		case f.b > 0:
			o.reset = f.a + 2*f.per - now
		case f.c > 0:
			o.reset = f.a + f.per - now
		}
		if o.deny {
			o.retry = counterRetry(l, now, f.a, f.c, f.b, c.Cost)
		}
		ttl = max(ttl, f.a+2*f.per-now)
	}
	if debit {
		sh.setFields(c.Keys.State, state, now+ttl)
	}
	return outs, admitted
}
