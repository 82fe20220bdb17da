package limiter

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/rules"
)

// A check to which rules that reserve apply (rules.Rule.Reserve) takes a
// reservation of its estimate on each of their keys, named by the same id
// as its holds (Decision.Hold): the request holds those units until its
// report settles them with its actual cost (ReportHold). As with holds,
// only an admitted request keeps them: a refused one's are settled at
// cost 0 at once, refunding all of them (endHolds). A reservation nobody
// settles lapses keeping its units spent.

// The results of rate_limit_reservations_total.
const (
	reservationTaken    = "taken"    // a check reserved its estimate
	reservationDenied   = "denied"   // a check's estimate did not fit
	reservationReturned = "returned" // the request was refused: settled at 0 at once
	reservationSettled  = "settled"  // a report settled one
	reservationUnknown  = "unknown"  // a report named one its key does not hold: unknown, settled already, lapsed or another key's
)

// The kinds of rate_limit_reservation_units_total.
const (
	unitsReserved = "reserved" // taken by checks
	unitsRefunded = "refunded" // given back by settles and refused requests
	unitsExcess   = "excess"   // debited by settles beyond the reservation
)

// countReservations counts what d's takes of reservations did.
func (s *Service) countReservations(d *Decision) {
	for i, a := range d.Applied {
		if !a.Call.Reserves() || a.Call.Settle || i >= len(d.Results) {
			continue
		}
		r := d.Results[i]
		switch {
		case d.holds(i):
			s.metrics.reservations.WithLabelValues(a.Rule.ID, reservationTaken).Inc()
			s.metrics.reservedUnits.WithLabelValues(a.Rule.ID, unitsReserved).Add(float64(r.Reserved))
		case !r.Allowed:
			s.metrics.reservations.WithLabelValues(a.Rule.ID, reservationDenied).Inc()
		}
	}
}

// countSettles counts what a report's settles did.
func (s *Service) countSettles(d *Decision) {
	for i, a := range d.Applied {
		if !a.Call.Settle || i >= len(d.Results) {
			continue
		}
		r := d.Results[i]
		if !r.Settled {
			s.metrics.reservations.WithLabelValues(a.Rule.ID, reservationUnknown).Inc()
			continue
		}
		s.metrics.reservations.WithLabelValues(a.Rule.ID, reservationSettled).Inc()
		s.metrics.reservedUnits.WithLabelValues(a.Rule.ID, unitsRefunded).Add(float64(r.Refunded))
		s.metrics.reservedUnits.WithLabelValues(a.Rule.ID, unitsExcess).Add(float64(r.Excess))
	}
}

// settleInMemory settles in local memory the reservations that d (a
// report, or Envoy's stream-done call), decided in Redis, named and Redis
// did not know: taken in memory while Redis was away (on_redis_failure:
// local) and reported once it is back. Their reports' costs are then
// debited in Redis, in one more round trip, so that they count in the
// budget the limiters share: without it, such a request's cost would be
// counted nowhere. When that round trip fails, they stay unsettled
// (counted as unknown) and their costs are lost.
func (s *Service) settleInMemory(ctx context.Context, d *Decision, now time.Time) {
	if d.Mode != ModeRedis {
		return
	}
	var at []int
	var debits []decide.Call
	var reserved []int64
	for i := range d.Applied {
		a := &d.Applied[i]
		if !a.Call.Settle || i >= len(d.Results) || d.Results[i].Settled {
			continue
		}
		units, ok := s.local.mem.Unreserve(a.Call, now.UnixMilli())
		if !ok {
			continue
		}
		c := a.Call
		c.Settle, c.HoldID = false, "" // a report's plain debit of its cost
		at, debits, reserved = append(at, i), append(debits, c), append(reserved, units)
	}
	if len(debits) == 0 {
		return
	}
	detached := detachedContext{parent: ctx}
	results, err := s.backend.Decide(&detached, debits)
	if s.roundTrip(err) != nil {
		s.log.Debug("reservations taken in memory not debited in redis", zap.Int("reservations", len(debits)), zap.Error(err))
		return
	}
	for k, i := range at {
		r := results[k]
		r.Settled, r.Reserved, r.Excess = true, reserved[k], debits[k].Cost // Redis held none of it
		d.Results[i] = r
		s.over.put(&debits[k], r, now)
	}
	d.aggregate()
}

// initReserveRules starts at 0 the reservation series of set's rules that
// reserve.
func (m *metrics) initReserveRules(set *rules.Set) {
	for _, r := range set.Rules() {
		if !r.Reserves() {
			continue
		}
		for _, res := range []string{reservationTaken, reservationDenied, reservationReturned, reservationSettled, reservationUnknown} {
			m.reservations.WithLabelValues(r.ID, res)
		}
		for _, k := range []string{unitsReserved, unitsRefunded, unitsExcess} {
			m.reservedUnits.WithLabelValues(r.ID, k)
		}
	}
}
