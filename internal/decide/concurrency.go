package decide

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"time"
)

// Concurrency limits (Algorithm Concurrency) admit at most Limit.Requests
// requests of a key in flight: a call of cost 1 takes a hold named by
// Call.HoldID, which ends when a call with Call.Release names it again, or
// lapses Limit.Per after it was taken when nobody releases it (a crashed
// gateway or application). The state key is a sorted set (see
// lua/concurrency.lua): member the hold id, score the ms the hold lapses
// at. Every call first drops the holds lapsed by now (score <= now) and
// counts them (Result.Lapsed); then
//
//   - a take (cost 1) of an id the key holds already (a replay) is
//     admitted and changes nothing; else it is admitted and adds the id,
//     lapsing at now + Per, when fewer than Requests are held, and denied
//     writing nothing when not;
//   - a call of cost 0 asks whether a hold would fit now and writes
//     nothing;
//   - a release removes the id when the key holds it (Result.Released).
//     An unknown id, one released already or one lapsed changes nothing:
//     the three cannot be told apart, ids not being kept after their
//     hold. A hold is released only through its own key: the same id on
//     another key is unknown there.
//   - a release without an id (a gateway that cannot name the hold, such
//     as Envoy's stream-done call without the answered id) removes the
//     oldest hold of the key: the one that lapses first, the smallest id
//     among those lapsing at the same millisecond (Redis's ZPOPMIN order).
//     On a key that holds nothing it changes nothing.
//
// The key expires one lifetime after its latest hold lapses: a key nobody
// releases holds nothing past twice its longest lifetime, and a call in
// the meantime finds the holds that lapsed and counts them (a crashed
// gateway's holds would otherwise go unseen, expiring with their key).

// HoldRetryCap bounds the RetryAfter of a denied take: the time until the
// earliest hold lapses, at most this, since a release may come at any
// moment before.
const HoldRetryCap = time.Second

// holdIDBytes is the random bytes of a hold id.
const holdIDBytes = 16

// HoldIDLen is the length of a hold id: 16 random bytes in unpadded
// base64url.
const HoldIDLen = 22

// NewHoldID returns a new hold id: 16 bytes from crypto/rand, in base64url
// without padding (22 characters), which nobody can guess.
func NewHoldID() string {
	var b [holdIDBytes]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand panics instead)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// ValidHoldID reports whether id has the shape NewHoldID gives: 22
// base64url characters decoding to 16 bytes, the unused bits zero.
func ValidHoldID(id string) bool {
	if len(id) != HoldIDLen {
		return false
	}
	var b [holdIDBytes + 1]byte
	n, err := base64.RawURLEncoding.Strict().Decode(b[:], []byte(id))
	return err == nil && n == holdIDBytes
}

// validateHolds checks what a concurrency call must be: one limit, no
// penalty, escalations, lease, debit of denied calls or probe, a cost of 1
// (take a hold) or 0 (would one fit), and a well-formed hold id for a take
// or a release. A call of any other algorithm names no hold.
func (c *Call) validateHolds() error {
	if c.Algorithm != Concurrency {
		if (c.HoldID != "" && c.Reserve == 0) || c.Release {
			return errors.New("a hold id or a release on a call that is not of concurrency or a reservation")
		}
		return nil
	}
	switch {
	case len(c.Limits) != 1:
		return errors.New("a concurrency call has exactly one limit")
	case c.Penalty > 0 || len(c.Escalations) > 0 || c.DebitDenied || c.Probe || c.Leased:
		return errors.New("a concurrency call has no penalty, escalations, debit of denied calls, probe or lease")
	case c.Cost > 1:
		return errors.New("a concurrency call costs 1 (take a hold) or 0 (would one fit)")
	case c.HoldID == "" && c.Cost == 1 && !c.Release:
		return errors.New("a take of a hold names the hold")
	case c.HoldID != "" && !ValidHoldID(c.HoldID):
		return errors.New("a hold id is 22 base64url characters (16 bytes)")
	}
	return nil
}

// concurrency mirrors lua/concurrency.lua.
func (sh *shard) concurrency(c Call, now int64) Result {
	l := c.Limits[0]
	r := Result{Allowed: true, Limit: l.Requests}
	e := sh.get(c.Keys.State)
	held := int64(0)
	if e != nil && e.holds == nil { // the key has another role: Redis would answer WRONGTYPE
		e.holds = newHoldSet()
	}
	if e != nil {
		r.Lapsed = e.holds.dropLapsed(now)
		held = int64(e.holds.len())
	}
	switch {
	case c.Release:
		id := c.HoldID
		if id == "" && e != nil {
			id = e.holds.oldest()
		}
		if e != nil && e.holds.remove(id) {
			r.Released = true
			held--
		}
	case c.Cost > 0:
		if _, ok := e.holdOf(c.HoldID); ok {
			break // a replay: the key holds it already
		}
		if held >= l.Requests {
			r.Allowed = false
			break
		}
		if e == nil {
			e = sh.create(c.Keys.State)
			e.holds = newHoldSet()
		}
		e.holds.add(c.HoldID, now+l.Per.Milliseconds())
		held++
		e.expireAt = e.holds.last() + l.Per.Milliseconds() // lapsed holds stay one lifetime, to be counted
	default:
		r.Allowed = held < l.Requests
	}
	if e != nil && e.holds.len() == 0 {
		delete(sh.keys, c.Keys.State) // Redis deletes an emptied set
		e = nil
	}
	r.Remaining = max(l.Requests-held, 0)
	if e != nil {
		r.ResetAfter = ms(e.holds.last() - now)
		if !r.Allowed {
			r.RetryAfter = min(ms(e.holds.first()-now), HoldRetryCap)
		}
	}
	return r
}

// holdOf returns the lapse time of hold id in e.
func (e *entry) holdOf(id string) (int64, bool) {
	if e == nil {
		return 0, false
	}
	return e.holds.get(id)
}

// giveBackHold releases the hold of a take answered too late, as
// give_back.lua does: only while it has not lapsed (a lapsed hold is left
// for the next call to count as lapsed). It returns 1 when it released it.
// Applied twice, the second finds nothing.
func (sh *shard) giveBackHold(c Call, now int64) int64 {
	e := sh.get(c.Keys.State)
	lapse, ok := e.holdOf(c.HoldID)
	if !ok || lapse <= now {
		return 0
	}
	e.holds.remove(c.HoldID)
	if e.holds.len() == 0 {
		delete(sh.keys, c.Keys.State)
	}
	return 1
}
