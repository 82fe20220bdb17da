package decidetest

import (
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
)

// Reservation is what a step of a reservation scenario does besides its
// cost: take (ID set), settle (ID set, Settle), or with no ID a report's
// plain debit.
type Reservation struct {
	ID     string
	Settle bool
}

// reserveScenario builds a reservation scenario step by step.
type reserveScenario struct{ Scenario }

func (s *reserveScenario) step(now, cost int64, r Reservation, want decide.Result) {
	s.Steps = append(s.Steps, Step{NowMs: now, Cost: cost, Want: want})
	s.Reserves = append(s.Reserves, r)
}

// take reserves cost under id; settle settles id with the actual cost;
// report debits cost as a report naming no reservation.
func (s *reserveScenario) take(now int64, id byte, cost int64, want decide.Result) {
	s.step(now, cost, Reservation{ID: HoldID(id)}, want)
}

func (s *reserveScenario) settle(now int64, id byte, cost int64, want decide.Result) {
	s.step(now, cost, Reservation{ID: HoldID(id), Settle: true}, want)
}

func (s *reserveScenario) report(now, cost int64, want decide.Result) {
	s.step(now, cost, Reservation{}, want)
}

// reserved returns r as a take that reserved units; settled as a settle
// that found a reservation of units, refunded and debited excess.
func reserved(r decide.Result, units int64) decide.Result {
	r.Reserved = units
	return r
}

func settled(r decide.Result, units, refunded, excess int64) decide.Result {
	r.Settled, r.Reserved, r.Refunded, r.Excess = true, units, refunded, excess
	return r
}

// ReserveScenarios returns the scenarios of reservations (decide.Call.Reserve),
// stamped as Scenarios: takes admitted only when the estimate fits, settles
// that refund (into the reservation's window only) or debit the excess
// (past the limit too), replayed and lapsed settles that settle nothing,
// and plain report debits on the same state.
func ReserveScenarios() []Scenario {
	fixed := reserveScenario{Scenario: Scenario{
		Name: "fixed window reservations",
		Rule: decide.Call{Algorithm: decide.FixedWindow, Limits: []decide.Limit{window(10, time.Second)}, Reserve: 5 * time.Second},
	}}
	fixed.take(1_000, 'a', 4, reserved(ok(0, 10, 6, 1000), 4))
	fixed.take(1_100, 'b', 4, reserved(ok(0, 10, 2, 900), 4))
	fixed.take(1_200, 'c', 4, deny(0, 10, 2, 800, 800))              // does not fit: nothing reserved
	fixed.settle(1_300, 'a', 1, settled(ok(0, 10, 5, 700), 4, 3, 0)) // 3 back
	fixed.settle(1_400, 'a', 1, ok(0, 10, 5, 600))                   // replayed: nothing
	fixed.settle(1_450, 'c', 0, ok(0, 10, 5, 550))                   // never reserved: nothing
	fixed.settle(1_500, 'b', 7, settled(ok(0, 10, 2, 500), 4, 0, 3)) // 3 more
	fixed.report(1_550, 1, ok(0, 10, 1, 450))                        // a plain report debits on the same state
	fixed.take(1_600, 'd', 1, reserved(ok(0, 10, 0, 400), 1))
	fixed.settle(2_100, 'd', 0, settled(ok(0, 10, 10, 900), 1, 0, 0)) // its window is gone: nothing back
	fixed.take(2_200, 'e', 3, reserved(ok(0, 10, 7, 800), 3))
	fixed.settle(7_200, 'e', 0, ok(0, 10, 10, 800)) // lapsed at 7 200: nothing
	fixed.take(7_300, 'f', 10, reserved(ok(0, 10, 0, 700), 10))
	fixed.settle(7_400, 'f', 15, settled(deny(0, 10, 0, 600, 600), 10, 0, 5)) // past the limit
	fixed.take(7_500, 'g', 1, deny(0, 10, 0, 500, 500))
	fixed.settle(7_600, 'e', 0, deny(0, 10, 0, 400, 400)) // deleted when found lapsed

	twoLimits := reserveScenario{Scenario: Scenario{
		Name: "fixed window of two limits reservations",
		Rule: decide.Call{Algorithm: decide.FixedWindow, Limits: []decide.Limit{window(10, time.Second), window(15, 10*time.Second)},
			Reserve: 20 * time.Second},
	}}
	twoLimits.take(10_000, 'a', 8, reserved(ok(0, 10, 2, 1000), 8))
	twoLimits.take(11_000, 'b', 6, reserved(ok(1, 15, 1, 9000), 6))
	twoLimits.settle(11_500, 'a', 2, settled(ok(0, 10, 4, 500), 8, 6, 0)) // only the 10 s window still holds a's
	twoLimits.settle(11_600, 'b', 1, settled(ok(0, 10, 9, 400), 6, 5, 0))

	bucket := reserveScenario{Scenario: Scenario{
		Name: "token bucket reservations",
		Rule: decide.Call{Algorithm: decide.TokenBucket, Limits: []decide.Limit{bucket(1, time.Second, 10)}, Reserve: time.Minute},
	}}
	bucket.take(100_000, 'a', 6, reserved(ok(0, 10, 4, 6000), 6))
	bucket.take(100_000, 'b', 6, deny(0, 10, 4, 6000, 2000))
	bucket.settle(101_000, 'a', 2, settled(ok(0, 10, 9, 1000), 6, 4, 0))
	bucket.take(101_000, 'c', 9, reserved(ok(0, 10, 0, 10000), 9))
	bucket.settle(102_000, 'c', 12, settled(deny(0, 10, 0, 12000, 5000), 9, 0, 3))
	bucket.settle(102_000, 'c', 12, deny(0, 10, 0, 12000, 2000))
	bucket.take(114_000, 'd', 10, reserved(ok(0, 10, 0, 10000), 10))
	bucket.settle(120_000, 'd', 0, settled(ok(0, 10, 10, 0), 10, 4, 0)) // refilled 6 meanwhile: 4 back up to the burst

	return stamped([]Scenario{fixed.Scenario, twoLimits.Scenario, bucket.Scenario})
}
