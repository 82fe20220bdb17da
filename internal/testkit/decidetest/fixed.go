package decidetest

import (
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
)

// fixedWindow returns the scenarios of the fixed window.
func fixedWindow() []Scenario {
	call := func(limits ...decide.Limit) decide.Call {
		return decide.Call{Algorithm: decide.FixedWindow, Limits: limits}
	}
	withHolds := func(c decide.Call, penalty time.Duration, esc ...decide.Escalation) decide.Call {
		c.Penalty, c.Escalations = penalty, esc
		return c
	}
	return []Scenario{
		{
			Name: "fixed_window/single limit",
			Rule: call(window(3, time.Second)),
			Steps: []Step{
				{10_000, 1, ok(0, 3, 2, 1000)},
				{10_100, 1, ok(0, 3, 1, 900)},
				{10_200, 1, ok(0, 3, 0, 800)},
				{10_300, 1, deny(0, 3, 0, 700, 700)},
				{11_000, 1, ok(0, 3, 2, 1000)},
			},
		},
		{
			Name: "fixed_window/multi-limit all-or-nothing",
			Rule: call(window(3, time.Minute), window(2, time.Second)),
			Steps: []Step{
				{60_000, 1, ok(1, 2, 1, 1000)},
				{60_100, 1, ok(1, 2, 0, 900)},
				{60_200, 1, deny(1, 2, 0, 800, 800)},
				{60_300, 1, deny(1, 2, 0, 700, 700)},
				// the denials above were not counted by the minute limit
				{61_000, 1, ok(0, 3, 0, 59_000)},
				{61_500, 1, deny(0, 3, 0, 58_500, 58_500)},
			},
		},
		{
			Name: "fixed_window/largest retry binds",
			Rule: call(window(1, time.Second), window(1, 2*time.Second)),
			Steps: []Step{
				{10_000, 1, ok(0, 1, 0, 1000)},
				{10_500, 1, deny(1, 1, 0, 1500, 1500)},
			},
		},
		{
			Name: "fixed_window/cost above one and above quota",
			Rule: call(window(5, time.Second)),
			Steps: []Step{
				{5_000, 3, ok(0, 5, 2, 1000)},
				{5_100, 3, deny(0, 5, 2, 900, 900)},
				{5_200, 2, ok(0, 5, 0, 800)},
				{5_300, 6, deny(0, 5, 0, 700, 700)},
				{6_000, 6, deny(0, 5, 5, 1000, 1000)},
				{6_000, 0, ok(0, 5, 5, 1000)},
			},
		},
		{
			Name: "fixed_window/burst at one millisecond",
			Rule: call(window(3, time.Second)),
			Steps: []Step{
				{7_000, 1, ok(0, 3, 2, 1000)},
				{7_000, 1, ok(0, 3, 1, 1000)},
				{7_000, 1, ok(0, 3, 0, 1000)},
				{7_000, 1, deny(0, 3, 0, 1000, 1000)},
			},
		},
		{
			Name: "fixed_window/clock goes backwards",
			Rule: call(window(2, time.Second)),
			Steps: []Step{
				{9_500, 1, ok(0, 2, 1, 500)},
				// the stored window (9000) is later than 8000: it is kept
				{8_200, 1, ok(0, 2, 0, 1800)},
				{8_300, 1, deny(0, 2, 0, 1700, 1700)},
				{10_000, 1, ok(0, 2, 1, 1000)},
			},
		},
		{
			Name: "fixed_window/penalty",
			Rule: withHolds(call(window(1, time.Second)), 5*time.Second),
			Steps: []Step{
				{20_000, 1, ok(0, 1, 0, 1000)},
				{20_100, 1, deny(0, 1, 0, 5000, 5000)},
				{21_500, 1, held(1, 3600)},
				{25_100, 1, ok(0, 1, 0, 900)},
			},
		},
		{
			// the calls held report when a call is admitted again, as the
			// denial that started the hold did: here the window's end,
			// after the hold's
			Name: "fixed_window/penalty shorter than the window",
			Rule: withHolds(call(window(1, 10*time.Second)), time.Second),
			Steps: []Step{
				{30_000, 1, ok(0, 1, 0, 10_000)},
				{30_100, 1, deny(0, 1, 0, 9900, 9900)},
				{30_500, 1, held(1, 9500)},
				// the hold is over, the window is not: denied and held again
				{31_100, 1, deny(0, 1, 0, 8900, 8900)},
				{32_000, 1, held(1, 8000)},
				{40_000, 1, ok(0, 1, 0, 10_000)},
			},
		},
		{
			Name: "fixed_window/escalations",
			Rule: withHolds(call(window(1, time.Second)), 0,
				decide.Escalation{Triggers: 2, Within: 10 * time.Second, Penalty: 3 * time.Second},
				decide.Escalation{Triggers: 3, Within: time.Minute, Penalty: 30 * time.Second}),
			Steps: []Step{
				{100_000, 1, ok(0, 1, 0, 1000)},
				{100_100, 1, deny(0, 1, 0, 900, 900)},
				{100_200, 1, deny(0, 1, 0, 3000, 3000)},
				{100_300, 1, held(1, 2900)},
				{103_200, 1, ok(0, 1, 0, 800)},
				{103_300, 1, deny(0, 1, 0, 30_000, 30_000)},
				{110_000, 1, held(1, 23_300)},
				{133_300, 1, ok(0, 1, 0, 700)},
				// hits kept: the newest 3 (100200, 103300, 133400); 1 in 10s, 3 in 60s
				{133_400, 1, deny(0, 1, 0, 30_000, 30_000)},
			},
		},
		{
			Name: "fixed_window/penalty and escalation",
			Rule: withHolds(call(window(1, time.Second)), 2*time.Second,
				decide.Escalation{Triggers: 2, Within: 10 * time.Second, Penalty: 20 * time.Second}),
			Steps: []Step{
				{200_000, 1, ok(0, 1, 0, 1000)},
				{200_100, 1, deny(0, 1, 0, 2000, 2000)},
				{202_100, 1, ok(0, 1, 0, 900)},
				{202_200, 1, deny(0, 1, 0, 20_000, 20_000)},
				{203_000, 1, held(1, 19_200)},
			},
		},
	}
}
