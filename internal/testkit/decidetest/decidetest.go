// Package decidetest holds the scenario table shared by the tests of the
// reference model (internal/decide) and of the Lua scripts on real Redis
// (internal/redisstore), so both are held to the same expected results.
package decidetest

import (
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
)

// Step is one request of a scenario and the result it must get.
type Step struct {
	NowMs int64
	Cost  int64
	Want  decide.Result
}

// Scenario is a sequence of requests against one rule and subject.
type Scenario struct {
	Name string
	// Rule holds Algorithm, Limits, Penalty and Escalations; Keys, Cost and
	// NowMs are set per step by Call.
	Rule  decide.Call
	Steps []Step
	// Probes, when set, says which steps are probes (decide.Call.Probe):
	// the checks of a rule spent by reports, which debit nothing.
	Probes []bool
	// Holds, when set, says which hold each step of a concurrency scenario
	// takes or releases.
	Holds []Hold
	// Reserves, when set, says which reservation each step of a
	// reservation scenario takes or settles.
	Reserves []Reservation
}

// Keys returns the keys of one subject under prefix, sharing one hash tag.
func Keys(prefix, subject string) decide.Keys {
	tag := prefix + "{" + subject + "}:"
	return decide.Keys{State: tag + "state", Hold: tag + "hold", Hits: tag + "hits"}
}

// Call returns the call of step i with the given keys.
func (s Scenario) Call(keys decide.Keys, i int) decide.Call {
	c := s.Rule
	c.Keys = keys
	c.Cost = s.Steps[i].Cost
	c.NowMs = s.Steps[i].NowMs
	if i < len(s.Probes) && s.Probes[i] {
		c.Probe, c.DebitDenied = true, false
	}
	if i < len(s.Holds) {
		c.HoldID, c.Release = s.Holds[i].ID, s.Holds[i].Release
	}
	if i < len(s.Reserves) {
		r := s.Reserves[i]
		c.HoldID, c.Settle = r.ID, r.Settle
		c.DebitDenied = r.Settle || r.ID == "" // a take debits only when admitted; reports every call
	}
	return c
}

// Scenarios returns the scenarios of every algorithm but concurrency. Every
// step is decided at its NowMs, which its result reports
// (decide.Result.At).
func Scenarios() []Scenario {
	var all []Scenario
	all = append(all, fixedWindow()...)
	all = append(all, slidingWindow()...)
	all = append(all, slidingWindowCounter()...)
	all = append(all, tokenBucket()...)
	all = append(all, spentByReports()...)
	return stamped(all)
}

// HoldScenarios returns the scenarios of concurrency limits, stamped as
// Scenarios.
func HoldScenarios() []Scenario {
	return stamped(concurrency())
}

// stamped sets the At of every step's result to its NowMs.
func stamped(all []Scenario) []Scenario {
	for _, s := range all {
		for i := range s.Steps {
			s.Steps[i].Want.At = s.Steps[i].NowMs
		}
	}
	return all
}

func ok(index int, limit, remaining, resetMs int64) decide.Result {
	return decide.Result{Allowed: true, LimitIndex: index, Limit: limit, Remaining: remaining,
		ResetAfter: time.Duration(resetMs) * time.Millisecond}
}

func deny(index int, limit, remaining, resetMs, retryMs int64) decide.Result {
	return decide.Result{LimitIndex: index, Limit: limit, Remaining: remaining,
		ResetAfter: time.Duration(resetMs) * time.Millisecond,
		RetryAfter: time.Duration(retryMs) * time.Millisecond}
}

func held(limit, waitMs int64) decide.Result {
	w := time.Duration(waitMs) * time.Millisecond
	return decide.Result{Held: true, LimitIndex: -1, Limit: limit, ResetAfter: w, RetryAfter: w}
}

func window(requests int64, per time.Duration) decide.Limit {
	return decide.Limit{Requests: requests, Per: per}
}

func bucket(rate int64, per time.Duration, burst int64) decide.Limit {
	return decide.Limit{Rate: rate, Per: per, Burst: burst}
}
