package decidetest

import (
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
)

// tokenBucket returns the scenarios of the token bucket.
func tokenBucket() []Scenario {
	call := func(limits ...decide.Limit) decide.Call {
		return decide.Call{Algorithm: decide.TokenBucket, Limits: limits}
	}
	const big = 16_000_000_000
	return []Scenario{
		{
			Name: "token_bucket/single bucket",
			Rule: call(bucket(1, time.Second, 3)),
			Steps: []Step{
				{1_000_000, 1, ok(0, 3, 2, 1000)},
				{1_000_000, 1, ok(0, 3, 1, 2000)},
				{1_000_000, 1, ok(0, 3, 0, 3000)},
				{1_000_000, 1, deny(0, 3, 0, 3000, 1000)},
				{1_000_400, 1, deny(0, 3, 0, 2600, 600)},
				{1_001_000, 1, ok(0, 3, 0, 3000)},
				{1_010_000, 1, ok(0, 3, 2, 1000)},
			},
		},
		{
			Name: "token_bucket/refill remainder",
			Rule: call(bucket(2, 3*time.Second, 1)),
			Steps: []Step{
				{3_000_000, 1, ok(0, 1, 0, 1500)},
				{3_000_001, 1, deny(0, 1, 0, 1499, 1499)},
				{3_001_000, 1, deny(0, 1, 0, 500, 500)},
				{3_001_500, 1, ok(0, 1, 0, 1500)},
			},
		},
		{
			Name: "token_bucket/multi-limit and cost",
			Rule: call(bucket(10, time.Second, 10), bucket(20, time.Minute, 20)),
			Steps: []Step{
				{6_000_000, 5, ok(0, 10, 5, 500)},
				{6_000_000, 5, ok(0, 10, 0, 1000)},
				{6_000_100, 5, deny(0, 10, 1, 900, 400)},
				{6_000_500, 5, ok(0, 10, 0, 1000)},
				// cost above the burst of the first bucket: retry is its per
				{6_001_500, 15, deny(1, 20, 5, 43_500, 28_500)},
			},
		},
		{
			Name: "token_bucket/clock goes backwards",
			Rule: call(bucket(1, time.Second, 2)),
			Steps: []Step{
				{8_000_000, 1, ok(0, 2, 1, 1000)},
				{7_999_000, 1, ok(0, 2, 0, 2000)},
				{7_999_500, 1, deny(0, 2, 0, 2000, 1000)},
				{8_000_500, 1, deny(0, 2, 0, 1500, 500)},
				{8_001_000, 1, ok(0, 2, 0, 2000)},
			},
		},
		{
			Name: "token_bucket/penalty and escalations",
			Rule: decide.Call{
				Algorithm: decide.TokenBucket,
				Limits:    []decide.Limit{bucket(1, time.Second, 1)},
				Penalty:   500 * time.Millisecond,
				Escalations: []decide.Escalation{
					{Triggers: 2, Within: 10 * time.Second, Penalty: 5 * time.Second},
					{Triggers: 3, Within: time.Minute, Penalty: time.Minute},
				},
			},
			Steps: []Step{
				{9_000_000, 1, ok(0, 1, 0, 1000)},
				{9_000_100, 1, deny(0, 1, 0, 900, 900)},
				// held until 9_000_600; admitted from 9_001_000, when a
				// token is back
				{9_000_300, 1, held(1, 700)},
				{9_000_600, 1, deny(0, 1, 0, 5000, 5000)},
				{9_005_600, 1, ok(0, 1, 0, 1000)},
				{9_005_700, 1, deny(0, 1, 0, 60_000, 60_000)},
				{9_010_000, 1, held(1, 55_700)},
			},
		},
		{
			// burst*1000*per = 8e15, close to 2^53: the refill must stay exact
			Name: "token_bucket/large values",
			Rule: call(bucket(7, 8_000_000*time.Millisecond, 1_000_000)),
			Steps: []Step{
				{big, 1_000_000, ok(0, 1_000_000, 0, 1_142_857_142_858)},
				{big + 1, 1, deny(0, 1_000_000, 0, 1_142_857_142_857, 1_142_857)},
				{big + 1_142_857, 1, deny(0, 1_000_000, 0, 1_142_856_000_001, 1)},
				{big + 1_142_858, 1, ok(0, 1_000_000, 0, 1_142_857_142_857)},
			},
		},
	}
}
