package decidetest

import (
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
)

// spentByReports are rules spent by outcome reports: reports debit every
// cost, fitting or not (DebitDenied); checks are probes of cost 1, denied
// once no unit is left, and debit nothing.
func spentByReports() []Scenario {
	oneLimit := reportScenario{Scenario: Scenario{
		// One limit: a counted fixed window (INCRBY 0 for a probe).
		Name: "fixed window spent by reports",
		Rule: decide.Call{Algorithm: decide.FixedWindow, Limits: []decide.Limit{window(3, time.Second)}, DebitDenied: true},
	}}
	oneLimit.probe(10_000, ok(0, 3, 3, 1000))
	oneLimit.report(10_100, 2, ok(0, 3, 1, 900))
	oneLimit.probe(10_200, ok(0, 3, 1, 800))            // probes spend nothing
	oneLimit.report(10_300, 1, ok(0, 3, 0, 700))        // exactly the limit: admitted
	oneLimit.probe(10_400, deny(0, 3, 0, 600, 600))     // no unit left
	oneLimit.report(10_500, 2, deny(0, 3, 0, 500, 500)) // debited past the limit
	oneLimit.probe(10_600, deny(0, 3, 0, 400, 400))
	oneLimit.probe(11_000, ok(0, 3, 3, 1000)) // the next window

	twoLimits := reportScenario{Scenario: Scenario{
		// Two limits: the fixed window's script.
		Name: "fixed window of two limits spent by reports",
		Rule: decide.Call{Algorithm: decide.FixedWindow, Limits: []decide.Limit{window(3, time.Second), window(5, 10*time.Second)}, DebitDenied: true},
	}}
	twoLimits.probe(20_000, ok(0, 3, 3, 1000))
	twoLimits.report(20_100, 2, ok(0, 3, 1, 900))
	twoLimits.report(20_900, 1, ok(0, 3, 0, 100))
	twoLimits.probe(21_000, ok(1, 5, 2, 9000)) // a new second; the 10 s window holds 3
	twoLimits.report(21_100, 2, ok(1, 5, 0, 8900))
	twoLimits.probe(21_200, deny(1, 5, 0, 8800, 8800))
	twoLimits.report(21_300, 3, deny(1, 5, 0, 8700, 8700)) // both over: the longest retry binds
	twoLimits.probe(21_400, deny(1, 5, 0, 8600, 8600))
	twoLimits.probe(30_000, ok(0, 3, 3, 1000))
	return []Scenario{oneLimit.Scenario, twoLimits.Scenario}
}

// reportScenario builds a scenario of reports and probes.
type reportScenario struct{ Scenario }

func (s *reportScenario) probe(now int64, want decide.Result) {
	s.Steps = append(s.Steps, Step{NowMs: now, Cost: 1, Want: want})
	s.Probes = append(s.Probes, true)
}

func (s *reportScenario) report(now, cost int64, want decide.Result) {
	s.Steps = append(s.Steps, Step{NowMs: now, Cost: cost, Want: want})
	s.Probes = append(s.Probes, false)
}
