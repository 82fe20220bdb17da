package decide

// A give-back undoes what Redis counted for a call whose caller was refused
// without its answer: the round trip outlived the caller's deadline
// (REDIS_TIMEOUT), the limiter refused the request, and the reply came
// later saying Redis had admitted it. Left counted, those units would be
// spent by nobody: a slow Redis would refuse clients for the rest of their
// window while admitting nothing. Only an admission is given back: a
// denial counts nothing (or, for a call that debits denied calls, counts
// what an answer in time would have counted too), and a probe writes
// nothing.
//
// A give-back never lets a key admit more than it would have had the call
// never been made: it takes the units off the window (or log member) the
// call counted in only while that is still the key's, and puts tokens back
// in a bucket only up to its burst (less what leases hold).
//
// The give-back of a Concurrency take is the release of its hold: unlike a
// count, it is idempotent (the second finds no hold), so it may be sent
// again.
type GiveBack struct {
	// Call is the call as it was sent: keys, algorithm, limits, Leased.
	Call Call
	// Result is Redis's answer to it, which came too late: At finds the
	// window or log member the call counted in; Granted and LeaseUntil say
	// what a leased call was lent besides its cost.
	Result Result
}

// GiveBackOf returns the give-back of c, answered r after its caller was
// refused, and whether there is anything to give back.
func GiveBackOf(c Call, r Result) (GiveBack, bool) {
	if !r.Allowed || c.Probe || c.Release || c.Cost+r.Granted <= 0 {
		return GiveBack{}, false
	}
	return GiveBack{Call: c, Result: r}, true
}

// Units is the units g gives back: the call's cost and what it was lent.
func (g GiveBack) Units() int64 { return g.Call.Cost + g.Result.Granted }

// MaxGiveBackShift is the most later members of a sliding window's log a
// give-back rewrites: with more after the member it takes units off, it
// gives back nothing (and the caller counts its units as dropped), so that
// its work stays bounded on a busy key.
const MaxGiveBackShift = 64

// GiveBack undoes g on the state at nowMs, as lua/give_back.lua does, and
// returns the units given back: the most taken off any one limit's count
// (or put back in any one bucket), 0 when nothing was. Per algorithm and
// layout (see the header of lua/give_back.lua for why each never lets a key
// admit more than it would have had the call never been made):
//
//   - fixed window, leased or not (and a counted call, whose window the
//     model keeps in the same hash): for each limit whose stored window is
//     the one holding g.Result.At, the count less the units, at least 0.
//   - sliding window counter, leased or not: for each limit, the units off
//     the count of the window holding At, current or previous, while it is
//     stored; at least 0.
//   - sliding window log: the units off the oldest member scored from At on
//     (at most its own), every later member's totals shifted down by as
//     many; nothing when more than MaxGiveBackShift members follow, or when
//     At has left the largest window (its member may be trimmed).
//   - token bucket, leased or not: each stored bucket refilled to now as a
//     call would, then the units added, up to its burst less the units
//     leases hold; a leased call's grant, when its lease is the key's
//     current one, first stops counting as lent.
//   - concurrency: the hold g.Call.HoldID released, when the key holds it
//     and it has not lapsed by now (a lapsed one is left for the next call
//     to count as lapsed); 1 when released.
//
// A give-back touches only the state key: an admitted call wrote no hold
// or hit. It expires nothing and sets no expiry: every key keeps its own.
// Applied twice it takes the units twice (units of other calls): it must
// be applied at most once; but for concurrency, where the second finds no
// hold and changes nothing.
func (m *Memory) GiveBack(g GiveBack, nowMs int64) int64 {
	c := g.Call
	if !g.Result.Allowed || c.Probe || c.Release || len(c.Limits) == 0 {
		return 0
	}
	units := g.Units()
	if units <= 0 {
		return 0
	}
	sh := &m.shards[shardOf(c.Keys.State)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.get(c.Keys.State)
	if e == nil {
		return 0
	}
	if c.Algorithm == Concurrency {
		return sh.giveBackHold(c, nowMs)
	}
	at := g.Result.At
	switch c.Algorithm {
	case FixedWindow:
		return e.giveBackWindows(c, at, units, false)
	case SlidingWindowCounter:
		return e.giveBackWindows(c, at, units, true)
	case SlidingWindow:
		return e.giveBackLog(c, at, nowMs, units)
	case TokenBucket:
		return sh.giveBackTokens(g, nowMs, units)
	}
	return 0
}

// lastOfPer reports whether limit i of limits is the last of its per: the
// limits of one per share their fields, which hold what the last of them
// wrote (a call writes its limits in order), so a give-back undoes that
// one, once.
func lastOfPer(limits []Limit, i int) bool {
	for _, l := range limits[i+1:] {
		if l.Per == limits[i].Per {
			return false
		}
	}
	return true
}

// giveBackWindows takes units off the count of the window holding at of
// each limit (field b), or for the sliding window counter (previous) off
// the previous window's (field c) when the stored window is the one after
// it.
func (e *entry) giveBackWindows(c Call, at, units int64, previous bool) int64 {
	var most int64
	for n, l := range c.Limits {
		per := l.Per.Milliseconds()
		i := e.fieldOf(per)
		if i < 0 || !lastOfPer(c.Limits, n) {
			continue
		}
		f := &e.fields[i]
		start := at - mod(at, per)
		var take int64
		switch {
		case f.a == start:
			take = min(units, max(f.b, 0))
			f.b -= take
		case previous && f.a == start+per:
			take = min(units, max(f.c, 0))
			f.c -= take
		}
		most = max(most, take)
	}
	return most
}

// giveBackLog takes units off the oldest span scored from at on, and as
// many off the totals of every later span, as lua/give_back.lua does.
func (e *entry) giveBackLog(c Call, at, now, units int64) int64 {
	var maxPer int64
	for _, l := range c.Limits {
		maxPer = max(maxPer, l.Per.Milliseconds())
	}
	if at < now-maxPer {
		return 0
	}
	i := firstFrom(e.spans, at)
	if i == len(e.spans) || len(e.spans)-i-1 > MaxGiveBackShift {
		return 0
	}
	take := min(units, spanUnits(e.spans[i]))
	if take == 0 {
		return 0
	}
	e.spans[i].cum = minus(e.spans[i].cum, take)
	for j := i + 1; j < len(e.spans); j++ {
		e.spans[j].base, e.spans[j].cum = minus(e.spans[j].base, take), minus(e.spans[j].cum, take)
	}
	if spanUnits(e.spans[i]) == 0 {
		e.spans = append(e.spans[:i], e.spans[i+1:]...)
	}
	return take
}

func spanUnits(s span) int64 { return units(s.cum, s.base) }

// minus returns total - n modulo totalWrap, for 0 <= n < totalWrap.
func minus(total, n int64) int64 {
	if total < n {
		return total - n + totalWrap
	}
	return total - n
}

// giveBackTokens refills each stored bucket of the call to now, as a call
// of its algorithm does (under the cap of the key's live leases; lapsed
// leases first brought to their slot's end as lease.lua does), then puts
// units back, up to the burst less what leases still hold.
func (sh *shard) giveBackTokens(g GiveBack, now, units int64) int64 {
	c := g.Call
	e := sh.get(c.Keys.State)
	if e.lease.until != 0 && now >= e.lease.until {
		if e.lease.out > 0 {
			sh.refillUntil(c, e.lease.until, capped(c, e.lease.out, 0).Limits)
		}
		e.lease = leaseState{}
	}
	out := e.lease.out
	var most int64
	for n, l := range capped(c, out, 0).Limits {
		i := e.fieldOf(l.Per.Milliseconds())
		if i < 0 || !lastOfPer(c.Limits, n) {
			continue // absent: full
		}
		f := &e.fields[i]
		f.a, f.b = refill(l, f.a, f.b, now-f.c)
		f.c = max(f.c, now)
	}
	if g.Result.Granted > 0 && e.lease.until != 0 && g.Result.LeaseUntil == e.lease.until {
		out = max(0, out-g.Result.Granted)
		e.lease.out = out
	}
	for n, l := range c.Limits {
		i := e.fieldOf(l.Per.Milliseconds())
		if i < 0 || !lastOfPer(c.Limits, n) {
			continue
		}
		f := &e.fields[i]
		top := (l.Burst - out) * 1000
		if f.a >= top {
			continue
		}
		added := min(units*1000, top-f.a)
		f.a += added
		most = max(most, ceilDiv(added, 1000))
	}
	return most
}
