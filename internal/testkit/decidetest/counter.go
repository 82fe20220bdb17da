package decidetest

import (
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
)

// slidingWindowCounter returns the scenarios of the sliding window counter.
// The expected results are worked out by hand from the formulas in the
// header of lua/sliding_window_counter.lua; comments give the arithmetic
// (w is per minus the time elapsed in the current window).
func slidingWindowCounter() []Scenario {
	call := func(limits ...decide.Limit) decide.Call {
		return decide.Call{Algorithm: decide.SlidingWindowCounter, Limits: limits}
	}
	const (
		bigReq = 1_000_000_000
		bigPer = 8_000_000 // ms: requests × per = 8e15, close to 2^53
		bigNow = 2_000 * bigPer
	)
	return []Scenario{
		{
			Name: "sliding_window_counter/fresh key, limit in one window",
			Rule: call(window(3, time.Second)),
			Steps: []Step{
				// reset: the count weighs on until the end of the next window
				{10_000, 1, ok(0, 3, 2, 2000)},
				{10_100, 1, ok(0, 3, 1, 1900)},
				{10_200, 1, ok(0, 3, 0, 1800)},
				// next window: 3*w <= (3-1)*1000 once w <= 666, at 11334
				{10_300, 1, deny(0, 3, 0, 1700, 1034)},
				// w = 667: 2001 > 2000; remaining 3 - ceil(2.001)
				{11_333, 1, deny(0, 3, 0, 667, 1)},
				// w = 666: 1998 <= 2000; remaining 3 - 1 - ceil(1.998)
				{11_334, 1, ok(0, 3, 0, 1666)},
			},
		},
		{
			Name: "sliding_window_counter/previous window weighs less as time goes",
			Rule: call(window(4, time.Second)),
			Steps: []Step{
				{10_000, 4, ok(0, 4, 0, 2000)},
				// next window: 4*w <= 3*1000 once w <= 750, at 11250
				{10_300, 1, deny(0, 4, 0, 1700, 950)},
				// prev 4, w = 751: 3004 > 3000; reset when the weight is 0, at 12000
				{11_249, 1, deny(0, 4, 0, 751, 1)},
				{11_250, 1, ok(0, 4, 0, 1750)},
				// w = 500: 2000 <= (4-1-1)*1000
				{11_500, 1, ok(0, 4, 0, 1500)},
				// w = 400: 1600 > 1000; 4*w <= 1000 once w <= 250, at 11750
				{11_600, 1, deny(0, 4, 0, 1400, 150)},
				{11_750, 1, ok(0, 4, 0, 1250)},
				// w = 1: 4 > 0; next window: prev 3, 3*w <= 3000 at once (12000)
				{11_999, 1, deny(0, 4, 0, 1001, 1)},
				// prev 3, w = 1000: 3000 <= 3000
				{12_000, 1, ok(0, 4, 0, 2000)},
				// w = 500: 1500 <= 2000; remaining 4 - 2 - ceil(1.5)
				{12_500, 1, ok(0, 4, 0, 1500)},
				// cost 0, w = 100: remaining 4 - 2 - ceil(0.3)
				{12_900, 0, ok(0, 4, 1, 1100)},
				// prev 2, w = 600: remaining 4 - 1 - ceil(1.2)
				{13_400, 1, ok(0, 4, 1, 1600)},
				// the window of 13000 is two periods old at 15000: counts 0
				{15_000, 1, ok(0, 4, 3, 2000)},
			},
		},
		{
			Name: "sliding_window_counter/window two periods old counts nothing",
			Rule: call(window(2, time.Second)),
			Steps: []Step{
				{20_500, 2, ok(0, 2, 0, 1500)},
				// prev 2, w = 1: 2 > (2-0-2)*1000; the weight is 0 at 22000
				{21_999, 2, deny(0, 2, 1, 1, 1)},
				{22_000, 2, ok(0, 2, 0, 2000)},
			},
		},
		{
			Name: "sliding_window_counter/cost above one and above quota",
			Rule: call(window(5, time.Second)),
			Steps: []Step{
				// never admissible: retry is per; nothing counted, reset 0
				{49_000, 6, deny(0, 5, 5, 0, 1000)},
				{50_000, 3, ok(0, 5, 2, 2000)},
				// next window: 3*w <= (5-3)*1000 once w <= 666, at 51334
				{50_400, 3, deny(0, 5, 2, 1600, 934)},
				{50_500, 2, ok(0, 5, 0, 1500)},
				{50_600, 6, deny(0, 5, 0, 1400, 1000)},
				// cost = requests: both windows must be empty, at 52000
				{50_700, 5, deny(0, 5, 0, 1300, 1300)},
				{50_800, 0, ok(0, 5, 0, 1200)},
				// prev 5, w = 1: 5 > 0; remaining 5 - ceil(0.005)
				{51_999, 5, deny(0, 5, 4, 1, 1)},
				{52_000, 5, ok(0, 5, 0, 2000)},
			},
		},
		{
			Name: "sliding_window_counter/cost needs two windows",
			Rule: call(window(2, time.Second)),
			Steps: []Step{
				{30_000, 1, ok(0, 2, 1, 2000)},
				// (2-2)*1000 < 1 in the next window too: wait for 32000
				{30_100, 2, deny(0, 2, 1, 1900, 1900)},
				{31_999, 2, deny(0, 2, 1, 1, 1)},
				{32_000, 2, ok(0, 2, 0, 2000)},
			},
		},
		{
			Name: "sliding_window_counter/multi-limit all-or-nothing",
			Rule: call(window(2, time.Second), window(5, 10*time.Second)),
			Steps: []Step{
				{100_000, 1, ok(0, 2, 1, 2000)},
				{100_500, 1, ok(0, 2, 0, 1500)},
				// the second limit admits; the first denies until w <= 500
				{100_600, 1, deny(0, 2, 0, 1400, 900)},
				// the denial was not counted by the 10s limit (2 of 5 so far)
				{101_500, 1, ok(0, 2, 0, 1500)},
				// the 1s window of 101000 is two periods old; ties bind the first
				{103_000, 1, ok(0, 2, 1, 2000)},
				{104_000, 1, ok(0, 2, 0, 2000)},
				// 10s limit full: next window, 5*w <= 4*10000 once w <= 8000
				{106_000, 1, deny(1, 5, 0, 14_000, 6000)},
				// prev 5, w = 8000: remaining 5 - 1 - 4
				{112_000, 1, ok(1, 5, 0, 18_000)},
			},
		},
		{
			Name: "sliding_window_counter/largest retry binds",
			Rule: call(window(1, time.Second), window(1, 2*time.Second)),
			Steps: []Step{
				{10_000, 1, ok(0, 1, 0, 2000)},
				{10_500, 1, deny(1, 1, 0, 3500, 3500)},
			},
		},
		{
			Name: "sliding_window_counter/clock goes backwards",
			Rule: call(window(2, time.Second)),
			Steps: []Step{
				{9_500, 1, ok(0, 2, 1, 1500)},
				// the stored window (9000) is later than 8000: kept, decided
				// as at its start
				{8_200, 1, ok(0, 2, 0, 2800)},
				// next window: 2*w <= 1000 once w <= 500, at 10500
				{8_300, 1, deny(0, 2, 0, 2700, 2200)},
				{10_000, 1, deny(0, 2, 0, 1000, 500)},
				{10_500, 1, ok(0, 2, 0, 1500)},
				// back before the stored window (10000): prev 2 weighs fully;
				// in the next window prev 1 allows 1 at once (11000)
				{9_900, 1, deny(0, 2, 0, 2100, 1100)},
				{11_000, 1, ok(0, 2, 0, 2000)},
			},
		},
		{
			Name: "sliding_window_counter/penalty and escalation",
			Rule: decide.Call{
				Algorithm: decide.SlidingWindowCounter,
				Limits:    []decide.Limit{window(1, time.Second)},
				Penalty:   time.Second,
				Escalations: []decide.Escalation{
					{Triggers: 2, Within: 5 * time.Second, Penalty: 10 * time.Second},
				},
			},
			Steps: []Step{
				{30_000, 1, ok(0, 1, 0, 2000)},
				// the limit's own retry (32000) outlasts the penalty, and
				// the held calls report it too
				{30_100, 1, deny(0, 1, 0, 1900, 1900)},
				{30_500, 1, held(1, 1500)},
				{31_100, 1, deny(0, 1, 0, 10_000, 10_000)},
				{35_000, 1, held(1, 6100)},
				{41_100, 1, ok(0, 1, 0, 1900)},
			},
		},
		{
			Name: "sliding_window_counter/large values",
			Rule: call(window(bigReq, bigPer*time.Millisecond)),
			Steps: []Step{
				{bigNow, bigReq, ok(0, bigReq, 0, 2*bigPer)},
				// prev 1e9, w = 7_999_999: 7_999_999e9 <= (1e9-1)*8e6;
				// remaining 1e9 - 1 - (1e9 - 125)
				{bigNow + bigPer + 1, 1, ok(0, bigReq, 124, 2*bigPer-1)},
				// 7_999_999e9 > (1e9-126)*8e6 = 7_999_998_992e6; admitted
				// once w <= floor(7_999_998.992)
				{bigNow + bigPer + 1, 125, deny(0, bigReq, 124, 2*bigPer-1, 1)},
				{bigNow + bigPer + 2, 125, ok(0, bigReq, 124, 2*bigPer-2)},
			},
		},
	}
}
