package decidetest

import (
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
)

// largeCosts returns the sliding-window scenarios of large costs, of the
// running totals the log keeps (see the header of lua/sliding_window.lua)
// and of the bound on trimming.
func largeCosts() []Scenario {
	call := func(limits ...decide.Limit) decide.Call {
		return decide.Call{Algorithm: decide.SlidingWindow, Limits: limits}
	}
	const (
		million  = 1_000_000
		t0       = 3_600_000
		huge     = 4_000_000_000_000_000 // totals pass 2^53 after two windows of it
		nearWrap = 9_007_199_254_740_794 // 2^53 - 198
		t1       = 300_000
	)
	return []Scenario{
		{
			Name: "sliding_window/cost of a whole limit and above it, two limits",
			Rule: call(window(million, time.Minute), window(2_500_000, time.Hour)),
			Steps: []Step{
				{t0, million + 1, deny(0, million, million, 0, 60_000)},
				{t0, million, ok(0, million, 0, 60_001)},
				{t0 + 1, 1, deny(0, million, 0, 60_000, 60_000)},
				// the minute is empty again; the hour holds a million
				{t0 + 60_001, million, ok(0, million, 0, 60_001)},
				// the hour's 500 000th unit (at t0) must leave it first
				{t0 + 120_002, million, deny(1, 2_500_000, 500_000, 3_540_000, 3_479_999)},
				{t0 + 120_002, 500_000, ok(1, 2_500_000, 0, 3_600_001)},
				// the units at t0 have left the hour; remaining ties bind the first
				{t0 + 3_600_001, 1, ok(0, million, 999_999, 60_001)},
			},
		},
		{
			Name: "sliding_window/retry finds the member holding the unit",
			Rule: call(window(10, time.Second)),
			Steps: []Step{
				{200_000, 3, ok(0, 10, 7, 1001)},
				{200_100, 2, ok(0, 10, 5, 1001)},
				{200_200, 4, ok(0, 10, 1, 1001)},
				{200_300, 1, ok(0, 10, 0, 1001)},
				// units 1-3 at 200000, 4-5 at 200100, 6-9 at 200200
				{200_400, 6, deny(0, 10, 0, 901, 801)},
				{200_400, 3, deny(0, 10, 0, 901, 601)},
				{200_400, 4, deny(0, 10, 0, 901, 701)},
				{201_001, 3, ok(0, 10, 0, 1001)},
				{201_001, 1, deny(0, 10, 0, 1001, 100)},
				{201_001, 0, ok(0, 10, 0, 1001)},
			},
		},
		{
			Name: "sliding_window/the running total wraps at 2^53",
			Rule: call(window(huge, time.Second)),
			Steps: []Step{
				{t1, huge, ok(0, huge, 0, 1001)},
				{t1 + 1001, huge, ok(0, huge, 0, 1001)},
				// total 8e15 + 3e15 - 2^53
				{t1 + 2002, 3_000_000_000_000_000, ok(0, huge, 1_000_000_000_000_000, 1001)},
				{t1 + 2003, 1_000_000_000_000_000, ok(0, huge, 0, 1001)},
				{t1 + 2004, 1, deny(0, huge, 0, 1000, 999)},
				{t1 + 2004, 3_500_000_000_000_000, deny(0, huge, 0, 1000, 1000)},
				{t1 + 3003, 3_000_000_000_000_000, ok(0, huge, 0, 1001)},
			},
		},
		{
			// count + cost would pass 2^53 and round: the script never forms it
			Name: "sliding_window/counts and costs near 2^53",
			Rule: call(window(nearWrap, time.Second)),
			Steps: []Step{
				{500_000, 8_000_000_000_000_002, ok(0, nearWrap, 1_007_199_254_740_792, 1001)},
				{500_001, 1, ok(0, nearWrap, 1_007_199_254_740_791, 1001)},
				// every unit must leave: the last one is at 500001
				{500_002, nearWrap, deny(0, nearWrap, 1_007_199_254_740_791, 1000, 1000)},
			},
		},
		trimBound(),
	}
}

// trimBound shows that a new member trims at most 32 members that left the
// window, and that nothing else trims: 70 admissions in 70 ms, then one
// after they all left the window trims 32 of them; after a denial and an
// admission into the newest member the other 38 count again when the clock
// goes back.
func trimBound() Scenario {
	const t = 400_000
	s := Scenario{
		Name: "sliding_window/a new member trims at most 32 old ones",
		Rule: decide.Call{Algorithm: decide.SlidingWindow, Limits: []decide.Limit{window(100, time.Second)}},
	}
	for i := range int64(70) {
		s.Steps = append(s.Steps, Step{t + i, 1, ok(0, 100, 99-i, 1001)})
	}
	s.Steps = append(s.Steps,
		Step{t + 1070, 1, ok(0, 100, 99, 1001)}, // t+32 to t+69 are left
		Step{t + 1070, 100, deny(0, 100, 99, 1001, 1001)},
		// [t+40, t+1040] holds the 30 units from t+40 and the one at t+1070,
		// which the unit admitted joins
		Step{t + 1040, 1, ok(0, 100, 68, 1031)},
		Step{t + 1040, 70, deny(0, 100, 68, 1031, 2)},
		Step{t + 1040, 69, deny(0, 100, 68, 1031, 1)},
	)
	return s
}
