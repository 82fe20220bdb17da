package decidetest

import (
	"strings"
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
)

// Hold is what a step of a concurrency scenario does besides its cost: the
// hold it names, and whether it releases it.
type Hold struct {
	ID      string
	Release bool
}

// HoldID returns a well-formed hold id made of c (a letter or digit), so
// that scenarios read alike on every run.
func HoldID(c byte) string {
	return strings.Repeat(string(c), decide.HoldIDLen-1) + "A"
}

// holdScenario builds a concurrency scenario step by step.
type holdScenario struct{ Scenario }

func (s *holdScenario) step(now, cost int64, h Hold, want decide.Result) {
	s.Steps = append(s.Steps, Step{NowMs: now, Cost: cost, Want: want})
	s.Holds = append(s.Holds, h)
}

// take, probe and release add a step of cost 1 taking id, of cost 0 naming
// no hold, and releasing id.
func (s *holdScenario) take(now int64, id byte, want decide.Result) {
	s.step(now, 1, Hold{ID: HoldID(id)}, want)
}

func (s *holdScenario) probe(now int64, want decide.Result) {
	s.step(now, 0, Hold{}, want)
}

func (s *holdScenario) release(now int64, id byte, want decide.Result) {
	s.step(now, 0, Hold{ID: HoldID(id), Release: true}, want)
}

// releaseOldest adds a step releasing the key's oldest hold, naming none.
func (s *holdScenario) releaseOldest(now int64, want decide.Result) {
	s.step(now, 0, Hold{Release: true}, want)
}

// lapsed returns r with n holds found lapsed; released returns r as a
// release that ended a hold.
func lapsed(r decide.Result, n int64) decide.Result {
	r.Lapsed = n
	return r
}

func released(r decide.Result) decide.Result {
	r.Released = true
	return r
}

// concurrency returns the scenarios of concurrency limits: holds taken up
// to the limit, released (once), replayed, lapsing exactly at their lapse
// time, and a clock that goes back.
func concurrency() []Scenario {
	rule := func(n int64, life time.Duration) decide.Call {
		return decide.Call{Algorithm: decide.Concurrency, Limits: []decide.Limit{window(n, life)}}
	}

	full := holdScenario{Scenario{Name: "concurrency/take up to the limit, release, take again", Rule: rule(2, 10*time.Second)}}
	full.take(10_000, 'a', ok(0, 2, 1, 10_000))
	full.take(10_100, 'b', ok(0, 2, 0, 10_000))
	full.take(10_200, 'c', deny(0, 2, 0, 9_900, 1_000)) // the earliest lapses in 9.8 s: retry capped at 1 s
	full.probe(10_300, deny(0, 2, 0, 9_800, 1_000))
	full.release(10_400, 'a', released(ok(0, 2, 1, 9_700)))
	full.release(10_500, 'a', ok(0, 2, 1, 9_600)) // released already: nothing
	full.take(10_600, 'c', ok(0, 2, 0, 10_000))
	full.take(10_700, 'c', ok(0, 2, 0, 9_900)) // a replay: held already, nothing added
	full.release(10_800, 'z', ok(0, 2, 0, 9_800))
	full.probe(10_900, deny(0, 2, 0, 9_700, 1_000))
	full.release(11_000, 'b', released(ok(0, 2, 1, 9_600)))
	full.release(11_100, 'c', released(ok(0, 2, 2, 0))) // the last: the key is gone
	full.probe(11_200, ok(0, 2, 2, 0))

	lapse := holdScenario{Scenario{Name: "concurrency/a hold lapses at its lapse time", Rule: rule(1, time.Second)}}
	lapse.take(5_000, 'a', ok(0, 1, 0, 1_000))
	lapse.take(5_999, 'b', deny(0, 1, 0, 1, 1))
	lapse.take(6_000, 'b', lapsed(ok(0, 1, 0, 1_000), 1))
	lapse.release(7_000, 'b', lapsed(ok(0, 1, 1, 0), 1)) // a release racing the lapse: lapsed first
	lapse.release(7_000, 'a', ok(0, 1, 1, 0))
	lapse.take(7_001, 'a', ok(0, 1, 0, 1_000)) // an id lapsed and forgotten is new again
	lapse.take(7_002, 'a', ok(0, 1, 0, 999))   // a replay even when full

	back := holdScenario{Scenario{Name: "concurrency/the clock goes back", Rule: rule(2, time.Second)}}
	back.take(10_000, 'a', ok(0, 2, 1, 1_000)) // lapses at 11 000
	back.take(9_500, 'b', ok(0, 2, 0, 1_500))  // lapses at 10 500, before a
	back.take(10_600, 'c', lapsed(ok(0, 2, 0, 1_000), 1))
	back.take(9_000, 'd', deny(0, 2, 0, 2_600, 1_000))
	back.probe(10_999, deny(0, 2, 0, 601, 1))
	back.probe(11_000, lapsed(ok(0, 2, 1, 600), 1))
	back.release(9_000, 'c', released(ok(0, 2, 2, 0))) // a hold ends early on any clock

	// A release without an id (Envoy's stream-done call) ends the hold that
	// lapses first; among holds lapsing at the same ms, the smallest id.
	oldest := holdScenario{Scenario{Name: "concurrency/a release without an id ends the oldest hold", Rule: rule(3, 10*time.Second)}}
	oldest.releaseOldest(1_000, ok(0, 3, 3, 0)) // nothing held: nothing released
	oldest.take(1_000, 'a', ok(0, 3, 2, 10_000))
	oldest.take(1_100, 'b', ok(0, 3, 1, 10_000))
	oldest.take(1_200, 'c', ok(0, 3, 0, 10_000))
	oldest.take(1_300, 'd', deny(0, 3, 0, 9_900, 1_000))
	oldest.releaseOldest(1_400, released(ok(0, 3, 1, 9_800))) // a, lapsing at 11 000
	oldest.release(1_500, 'a', ok(0, 3, 1, 9_700))            // gone already
	oldest.take(1_600, 'd', ok(0, 3, 0, 10_000))
	oldest.releaseOldest(1_700, released(ok(0, 3, 1, 9_900))) // b
	oldest.release(1_800, 'c', released(ok(0, 3, 2, 9_800)))
	oldest.take(1_900, 'y', ok(0, 3, 1, 10_000))              // y and x lapse at the same ms:
	oldest.take(1_900, 'x', ok(0, 3, 0, 10_000))              // x, the smaller id, goes first
	oldest.releaseOldest(2_000, released(ok(0, 3, 1, 9_900))) // d, lapsing at 11 600
	oldest.releaseOldest(2_000, released(ok(0, 3, 2, 9_900))) // x
	oldest.release(2_000, 'x', ok(0, 3, 2, 9_900))
	oldest.release(2_000, 'y', released(ok(0, 3, 3, 0)))
	oldest.releaseOldest(2_100, ok(0, 3, 3, 0)) // beyond the holds: nothing
	oldest.take(2_200, 'e', ok(0, 3, 2, 10_000))
	oldest.releaseOldest(12_200, lapsed(ok(0, 3, 3, 0), 1)) // a lapsed hold is not released again

	return []Scenario{full.Scenario, lapse.Scenario, back.Scenario, oldest.Scenario}
}
