package decidetest

import (
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
)

// slidingWindow returns the scenarios of the sliding window.
func slidingWindow() []Scenario {
	call := func(limits ...decide.Limit) decide.Call {
		return decide.Call{Algorithm: decide.SlidingWindow, Limits: limits}
	}
	return append([]Scenario{
		{
			// the example of the specification
			Name: "sliding_window/5 per second and 100 per minute",
			Rule: call(window(5, time.Second), window(100, time.Minute)),
			Steps: []Step{
				{1000, 1, ok(0, 5, 4, 1001)},
				{1200, 1, ok(0, 5, 3, 1001)},
				{1500, 1, ok(0, 5, 2, 1001)},
				{1800, 1, ok(0, 5, 1, 1001)},
				{1900, 1, ok(0, 5, 0, 1001)},
				{2000, 1, deny(0, 5, 0, 901, 1)},
				{2100, 1, ok(0, 5, 0, 1001)},
			},
		},
		{
			Name: "sliding_window/cost above one and above quota",
			Rule: call(window(5, time.Second)),
			Steps: []Step{
				{50_000, 3, ok(0, 5, 2, 1001)},
				{50_400, 3, deny(0, 5, 2, 601, 601)},
				{50_500, 2, ok(0, 5, 0, 1001)},
				// the 4th oldest unit (at 50500) must leave the window
				{50_600, 4, deny(0, 5, 0, 901, 901)},
				{50_700, 6, deny(0, 5, 0, 801, 1000)},
				// the window [now-per, now] is inclusive
				{51_000, 1, deny(0, 5, 0, 501, 1)},
				{51_001, 3, ok(0, 5, 0, 1001)},
			},
		},
		{
			Name: "sliding_window/burst at one millisecond",
			Rule: call(window(3, time.Second)),
			Steps: []Step{
				{5_000, 1, ok(0, 3, 2, 1001)},
				{5_000, 1, ok(0, 3, 1, 1001)},
				{5_000, 1, ok(0, 3, 0, 1001)},
				{5_000, 1, deny(0, 3, 0, 1001, 1001)},
				{6_001, 2, ok(0, 3, 1, 1001)},
				// one member per ms: these units join the one at 6001
				{6_001, 1, ok(0, 3, 0, 1001)},
				{6_001, 1, deny(0, 3, 0, 1001, 1001)},
			},
		},
		{
			// one member whatever the cost
			Name: "sliding_window/large cost",
			Rule: call(window(2000, time.Minute)),
			Steps: []Step{
				{70_000, 1201, ok(0, 2000, 799, 60_001)},
				{70_000, 800, deny(0, 2000, 799, 60_001, 60_001)},
				{70_000, 799, ok(0, 2000, 0, 60_001)},
				{70_001, 1, deny(0, 2000, 0, 60_000, 60_000)},
			},
		},
		{
			Name: "sliding_window/multi-limit",
			Rule: call(window(2, time.Second), window(3, 10*time.Second)),
			Steps: []Step{
				{100_000, 1, ok(0, 2, 1, 1001)},
				{100_500, 1, ok(0, 2, 0, 1001)},
				{100_600, 1, deny(0, 2, 0, 901, 401)},
				{101_001, 1, ok(0, 2, 0, 1001)},
				{102_000, 1, deny(1, 3, 0, 9002, 8001)},
				{110_001, 1, ok(1, 3, 0, 10_001)},
			},
		},
		{
			Name: "sliding_window/largest retry binds",
			Rule: call(window(1, time.Second), window(1, 2*time.Second)),
			Steps: []Step{
				{10_000, 1, ok(0, 1, 0, 1001)},
				{10_500, 1, deny(1, 1, 0, 1501, 1501)},
			},
		},
		{
			Name: "sliding_window/clock goes backwards",
			Rule: call(window(2, time.Second)),
			Steps: []Step{
				{5_000, 1, ok(0, 2, 1, 1001)},
				// the member at 5000 is in the future but still counts; the
				// unit admitted joins it, so totals grow with scores
				{4_500, 1, ok(0, 2, 0, 1501)},
				// both units are at 5000: they leave the window at 6001
				{4_600, 1, deny(0, 2, 0, 1401, 1401)},
				{5_600, 1, deny(0, 2, 0, 401, 401)},
				// trims the units at 5000
				{6_001, 1, ok(0, 2, 1, 1001)},
				{5_500, 1, ok(0, 2, 0, 1502)},
				{5_600, 1, deny(0, 2, 0, 1402, 1402)},
			},
		},
		{
			Name: "sliding_window/penalty and escalation",
			Rule: decide.Call{
				Algorithm: decide.SlidingWindow,
				Limits:    []decide.Limit{window(1, time.Second)},
				Penalty:   time.Second,
				Escalations: []decide.Escalation{
					{Triggers: 2, Within: 5 * time.Second, Penalty: 10 * time.Second},
				},
			},
			Steps: []Step{
				{30_000, 1, ok(0, 1, 0, 1001)},
				{30_100, 1, deny(0, 1, 0, 1000, 1000)},
				{30_500, 1, held(1, 600)},
				{31_100, 1, ok(0, 1, 0, 1001)},
				{31_200, 1, deny(0, 1, 0, 10_000, 10_000)},
				{35_000, 1, held(1, 6200)},
			},
		},
	}, largeCosts()...)
}
