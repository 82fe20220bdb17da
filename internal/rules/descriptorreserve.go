package rules

import (
	"slices"
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
)

// A descriptor rule may reserve (Rule.Reserve), as a request rule spent by
// reports does: Envoy's two calls for one request (the debit pattern of a
// cost known after the response, an LLM's tokens) then become a take and
// a settle under one id.
//
//   - The request-time descriptor, sent with a hits_addend of 0 (is the
//     budget spent?), takes the rule's reserve instead: admitted only if
//     it fits, named by the request's hold id, which the answer carries in
//     dynamic_metadata as a concurrency rule's hold.
//   - The stream-done descriptor, sent with (ReleaseKey, <that id>) last
//     and hits_addend the units used, settles that reservation with them
//     (refund or excess), once: a replay names a record the first settle
//     deleted. A request Envoy refused has no id in its metadata, so its
//     stream-done descriptor is never sent.
//   - A descriptor without the hold entry and with a hits_addend above 0
//     is debited as before (Applied.Debit): the stream-done call of a
//     route not yet sending the id keeps counting what requests used, and
//     a call that is neither a take nor a settle is not guessed at.

// validateDescriptorReserve checks what a descriptor rule that reserves
// must be, besides what every rule that reserves must be (validateReserve),
// and reports whether the rest is worth checking.
func validateDescriptorReserve(r *Rule, p problems) bool {
	var held []string
	if r.Penalty != 0 || slices.ContainsFunc(r.Schedule, func(e ScheduleEntry) bool { return e.Penalty != nil && *e.Penalty != 0 }) {
		held = append(held, "penalty")
	}
	if len(r.Escalate) > 0 {
		held = append(held, "escalate")
	}
	switch {
	case r.Descriptor.Unlimited:
		p.add("reserve", "not with unlimited: an unlimited rate limit counts nothing to reserve")
	case r.Debit == DebitAdmitted:
		p.add("reserve", "not with debit: admitted: the stream-done call's units were used, and what exceeds the "+
			"reservation is debited whether it fits or not (debit: always, the default of descriptor rules)")
	case len(held) > 0:
		p.add("reserve", "not with %s: a spent budget refuses the request-time calls until the window frees it, "+
			"as for rules spent by reports", held[0])
	case r.Leased():
		p.add("reserve", "not with lease: a leased unit is spent in a limiter's memory, apart from the reservation's record")
	default:
		return true
	}
	return false
}

// reserving makes a, the Applied of a descriptor without a hold entry on
// reserving rule r, a take of the rule's reserve when its cost is 0 (the
// request-time call; the caller names it, Call.HoldID), else a debit of
// its cost (Applied.Debit). Both keep the rule's state where its
// reservations are (Call.Reserve: never a counted window).
func (r *Rule) reserving(a *Applied) {
	c := &a.Call
	c.Reserve = r.ReserveLifetime()
	if c.Cost == 0 {
		c.Cost, c.DebitDenied = r.Reserve, false
		return
	}
	a.Debit = true
}

// settle returns the Applied of desc, the stream-done descriptor of
// reserving rule r (its last entry is (ReleaseKey, id), the entries before
// it r's path): the settle of the reservation id names on the key the
// request-time descriptor took it on, with desc's cost as the actual cost.
// A value that is no hold id settles nothing and debits nothing
// (Applied.NoRelease: answered without Redis), as a report naming an
// unknown reservation.
func (r *Rule) settle(desc *Descriptor, i int, addrKey string, now time.Time) Applied {
	n := len(desc.Entries)
	taken := Descriptor{Entries: desc.Entries[:n-1], Cost: desc.Cost}
	a := Applied{Rule: r, Descriptor: i, Call: r.descriptorCall(&taken, addrKey, now)}
	a.Call.Reserve, a.Call.Settle, a.Call.DebitDenied = r.ReserveLifetime(), true, true
	if id := desc.Entries[n-1].Value; decide.ValidHoldID(id) {
		a.Call.HoldID = id
	} else {
		a.NoRelease = true
	}
	return a
}
