package decide

import (
	"slices"
	"sort"
)

// The sliding window's log is a running total of admitted units (see the
// header of lua/sliding_window.lua). Totals are kept modulo totalWrap, below
// which every integer is an exact Lua number; a new member trims at most
// maxTrim members that left the largest window.
const (
	totalWrap = 1 << 53
	maxTrim   = 32
)

// span is one member "<base>:<cum>" of the sliding window's sorted set: the
// units (base, cum] admitted at score (ms). Each span's base is the cum of
// the one before it.
type span struct {
	score, base, cum int64
}

// units returns the units between base and a later total cum.
func units(cum, base int64) int64 {
	d := cum - base
	if d < 0 {
		d += totalWrap
	}
	return d
}

// plus returns total + cost modulo totalWrap, computed as the script does.
func plus(total, cost int64) int64 {
	if cost >= totalWrap-total {
		return cost - (totalWrap - total)
	}
	return total + cost
}

// trimSpans removes up to maxTrim spans scored below from, oldest first.
// Reslicing is amortized O(1): append copies only the live spans when it
// outgrows the backing array.
func trimSpans(log []span, from int64) []span {
	return log[min(firstFrom(log, from), maxTrim):]
}

// firstFrom returns the index of the oldest span scored from on, or
// len(log).
func firstFrom(log []span, from int64) int {
	return sort.Search(len(log), func(i int) bool { return log[i].score >= from })
}

// nthScore returns the score of the span holding the need-th unit after
// log[first].base; need must not exceed the units from there to the end.
func nthScore(log []span, first int, need int64) int64 {
	base := log[first].base
	i := sort.Search(len(log)-first, func(i int) bool { return units(log[first+i].cum, base) >= need })
	return log[first+i].score
}

// slidingWindow mirrors lua/sliding_window.lua.
func (sh *shard) slidingWindow(c Call, now int64, outs []outcome) ([]outcome, bool) {
	var maxPer int64
	for _, l := range c.Limits {
		maxPer = max(maxPer, l.Per.Milliseconds())
	}
	e := sh.get(c.Keys.State)
	var log []span
	if e != nil {
		log = e.spans
	}
	var top span // the newest span; zero when none
	hasTop := len(log) > 0
	if hasTop {
		top = log[len(log)-1]
	}
	admitted := true
	var firstBuf [8]int
	firsts := firstBuf[:0]
	var countBuf [8]int64
	counts := countBuf[:0]
	for _, l := range c.Limits {
		i := firstFrom(log, now-l.Per.Milliseconds())
		var n int64
		if i < len(log) {
			n = units(top.cum, log[i].base)
		}
		firsts, counts = append(firsts, i), append(counts, n)
		deny := c.Cost > l.Requests-n
		admitted = admitted && !deny
		outs = append(outs, outcome{quota: l.Requests, deny: deny})
	}
	newest, hasNewest := top.score, hasTop
	var added int64 // units written: the cost, or what fits below MaxUsage
	if c.Cost > 0 && c.debits(admitted) {
		added = c.Cost
		if !admitted {
			most := slices.Max(counts) // the largest window's
			added = cappedAdd(most, c.Cost, MaxUsage-1) - most
		}
	}
	if added > 0 {
		if hasTop && top.score >= now {
			e.spans[len(e.spans)-1].cum = plus(top.cum, added)
		} else {
			e = sh.appendSpan(c.Keys.State, e, now, top.cum, added, maxPer)
			newest, hasNewest = now, true
		}
		if !admitted { // retry is counted on the log as written
			log = e.spans
			for i, l := range c.Limits {
				firsts[i] = firstFrom(log, now-l.Per.Milliseconds())
			}
		}
	}
	for i, l := range c.Limits {
		per := l.Per.Milliseconds()
		used := counts[i] + added
		o := &outs[i]
		o.remaining = l.Requests - used
		if hasNewest && newest >= now-per {
			o.reset = newest + per + 1 - now
		}
		if o.deny {
			if c.Cost > l.Requests {
				o.retry = per
			} else {
				need := used - (l.Requests - c.Cost)
				o.retry = nthScore(log, firsts[i], need) + per + 1 - now
			}
		}
	}
	return outs, admitted
}

// appendSpan mirrors append in lua/sliding_window.lua: cost units as a new
// newest span at now after total, then up to maxTrim spans that left the
// largest window trimmed, and the expiry. e is the key's entry or nil;
// appendSpan returns it.
func (sh *shard) appendSpan(key string, e *entry, now, total, cost, maxPer int64) *entry {
	if e == nil {
		e = sh.create(key)
	}
	e.spans = append(e.spans, span{score: now, base: total, cum: plus(total, cost)})
	e.spans = trimSpans(e.spans, now-maxPer)
	e.expireAt = now + maxPer + 1
	return e
}
