package decide

import (
	"errors"
	"time"
)

// Reservations let a rule whose budget outcome reports spend (the tokens
// an LLM call used, known only after the response) admit a request only
// when an estimate of its cost fits, and keep that estimate spent until
// the request's report says what it really cost. Without them every
// request in flight sees the same budget left, and N concurrent requests
// overrun it by N times the cost; with them, by at most what is reserved
// and not yet settled.
//
// A call of such a rule has Reserve set (the lifetime of a reservation).
// Its state stays in the hash of its algorithm (the call is never counted,
// see Call.Counted), and:
//
//   - a take (HoldID set, Settle false, Cost the estimate) is decided as
//     an ordinary call of that cost, debiting only when admitted; when
//     admitted with a cost above 0 it records the reservation under
//     ReservationKey(state, HoldID): the units, the time it was decided
//     at and the time it lapses at (now + Reserve).
//   - a settle (Settle, HoldID, Cost the actual cost, DebitDenied) reads
//     and deletes the record, atomically with what it does next, so that
//     a replayed report settles nothing. A record that has lapsed (now at
//     or past its lapse time) settles nothing either. A live one settles:
//     an actual cost above the reservation debits the excess whether it
//     fits or not, as a report does; one below it refunds the difference
//     as a give-back of the take would (GiveBack): for a fixed window only
//     into the window the reservation went into, while that window is
//     the key's and has not ended (units given back to an ended window
//     would admit nothing); for a token bucket, back into each bucket
//     (refilled to now) up to its burst.
//     The settle then answers the key's state as a call of cost 0 (of the
//     excess when there is one) would.
//
// A reservation nobody settles lapses keeping its units spent: a lost
// report never lets a key admit more than its limits. Fixed window and
// token bucket only: a sliding window log records each call's time, and a
// refund would have to rewrite it (see GiveBack's bounds); the sliding
// window counter's refund would reach a window already weighted into
// decisions. Leased rules are refused: a lease's units are spent in
// memory, apart from the record.

// MaxReserve bounds the estimate of one reservation (and a settle's
// actual cost): far above any budget, and exact in every script's
// arithmetic.
const MaxReserve = 1 << 40

// ReservationKey is the Redis key of the reservation that the take named
// id records for the state key state; it shares state's hash tag.
func ReservationKey(state, id string) string {
	return state + ":r:" + id
}

// validateReserve checks what a call of a reserving rule must be: fixed
// window or token bucket, not leased, no penalty, escalations or probe, a
// whole-millisecond lifetime; a take debits only when admitted and a
// settle debits denied calls, both naming a well-formed id.
func (c *Call) validateReserve() error {
	if c.Reserve == 0 {
		if c.Settle {
			return errors.New("a settle on a call of a rule that does not reserve")
		}
		return nil
	}
	switch {
	case c.Reserve < time.Millisecond || c.Reserve%time.Millisecond != 0:
		return errors.New("reserve: the lifetime is not a positive whole number of milliseconds")
	case c.Algorithm != FixedWindow && c.Algorithm != TokenBucket:
		return errors.New("reserve: fixed_window and token_bucket only")
	case c.Leased || c.Probe || c.Penalty > 0 || len(c.Escalations) > 0:
		return errors.New("reserve: no lease, probe, penalty or escalations")
	case c.Cost > MaxReserve:
		return errors.New("reserve: cost above MaxReserve")
	case c.HoldID == "":
		if c.Settle {
			return errors.New("reserve: a settle names the reservation")
		}
	case !ValidHoldID(c.HoldID):
		return errors.New("a hold id is 22 base64url characters (16 bytes)")
	case c.Settle != c.DebitDenied:
		return errors.New("reserve: a take debits admitted calls only, a settle every call")
	}
	return nil
}

// reserves reports whether c is a take or a settle of a reservation,
// which the reservation script decides (lua/reserve.lua).
func (c *Call) reserves() bool {
	return c.Reserve > 0 && c.HoldID != ""
}

// Reserves reports whether c is a take or a settle of a reservation (see
// the comment at the top of reserve.go).
func (c *Call) Reserves() bool { return c.reserves() }

// reservation mirrors decide() in lua/reserve.lua: a take or a settle.
func (sh *shard) reservation(c Call, now int64) Result {
	key := ReservationKey(c.Keys.State, c.HoldID)
	if !c.Settle {
		r := sh.decide(c, now)
		if r.Allowed && c.Cost > 0 {
			rec := sh.create(key)
			*rec = entry{reserved: c.Cost, reservedAt: now, expireAt: now + c.Reserve.Milliseconds()}
			r.Reserved = c.Cost
		}
		return r
	}
	var reserved, at int64
	settled := false
	if rec := sh.get(key); rec != nil {
		delete(sh.keys, key)
		if now < rec.expireAt {
			settled, reserved, at = true, rec.reserved, rec.reservedAt
		}
	}
	var excess, refunded int64
	if settled {
		switch {
		case c.Cost > reserved:
			excess = c.Cost - reserved
		case c.Cost < reserved:
			refunded = sh.refund(c, now, at, reserved-c.Cost)
		}
	}
	d := c
	d.Cost = excess
	r := sh.decide(d, now)
	r.Settled, r.Reserved, r.Refunded, r.Excess = settled, reserved, refunded, excess
	return r
}

// Unreserve removes the reservation the settle c names (c.HoldID on
// c.Keys.State's key) and returns the units it reserved, when the memory
// held it unexpired at nowMs. It decides nothing else: the limiter asks it
// of its local memory for a settle Redis did not know, a reservation taken
// in memory while Redis was away and reported once it is back, whose cost
// the report then debits in Redis.
func (m *Memory) Unreserve(c Call, nowMs int64) (int64, bool) {
	sh := &m.shards[shardOf(c.Keys.State)]
	key := ReservationKey(c.Keys.State, c.HoldID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	rec := sh.get(key)
	if rec == nil {
		return 0, false
	}
	delete(sh.keys, key)
	return rec.reserved, nowMs < rec.expireAt
}

// refund gives units back to what the reservation decided at took, as a
// give-back of it would (Memory.GiveBack), and returns the units given back.
func (sh *shard) refund(c Call, now, at, units int64) int64 {
	e := sh.get(c.Keys.State)
	if e == nil {
		return 0
	}
	if c.Algorithm == TokenBucket {
		return sh.giveBackTokens(GiveBack{Call: c}, now, units)
	}
	var most int64
	for n, l := range c.Limits {
		per := l.Per.Milliseconds()
		start := at - mod(at, per)
		i := e.fieldOf(per)
		if i < 0 || !lastOfPer(c.Limits, n) || e.fields[i].a != start || now >= start+per {
			continue // another window, or the reservation's has ended: nothing it frees would admit anything
		}
		f := &e.fields[i]
		take := min(units, max(f.b, 0))
		f.b -= take
		most = max(most, take)
	}
	return most
}
