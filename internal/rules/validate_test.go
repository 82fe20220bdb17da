package rules

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
)

func dur(d time.Duration) Duration { return Duration(d) }

func reqs(n int64, per time.Duration) Limit { return Limit{Requests: n, Per: dur(per)} }

func bucket(rate, burst int64, per time.Duration) Limit {
	return Limit{Rate: rate, Burst: burst, Per: dur(per)}
}

func baseRule() Rule {
	return Rule{
		ID: "r1", Priority: 100, Key: []string{"ip"}, Algorithm: decide.SlidingWindow,
		Limits: []Limit{reqs(5, time.Second)}, OnRedisFailure: FailLocal,
	}
}

func ts(s string) Timestamp {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return Timestamp{t}
}

func TestRuleValidateErrors(t *testing.T) {
	tb := func(r *Rule) { r.Algorithm = decide.TokenBucket; r.Limits = []Limit{bucket(1, 10, time.Second)} }
	swc := func(r *Rule) { r.Algorithm = decide.SlidingWindowCounter }
	tests := []struct {
		name string
		mod  func(r *Rule)
		want string
	}{
		{"id missing", func(r *Rule) { r.ID = "" }, "id: required"},
		{"id with space", func(r *Rule) { r.ID = "bad id" }, `id: "bad id" must match ^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`},
		{"id with brace", func(r *Rule) { r.ID = "a}b" }, `id: "a}b" must match`},
		{"id leading dot", func(r *Rule) { r.ID = ".a" }, `id: ".a" must match`},
		{"id too long", func(r *Rule) { r.ID = strings.Repeat("a", 65) }, "must match"},
		{"endpoint relative", func(r *Rule) { r.Match.Endpoints = []string{"api"} }, `rule "r1": match.endpoints[0]: "api": must start with /`},
		{"endpoint partial double star", func(r *Rule) { r.Match.Endpoints = []string{"/ok", "/a/**b"} }, `rule "r1": match.endpoints[1]: "/a/**b": ** must be a whole segment`},
		{"endpoint not normalized", func(r *Rule) { r.Match.Endpoints = []string{"/a//b"} }, `match.endpoints[0]: "/a//b": must not contain an empty segment`},
		{"endpoint percent", func(r *Rule) { r.Match.Endpoints = []string{"/a%6C"} }, "must not contain %"},
		{"method", func(r *Rule) { r.Match.Methods = []string{"GE T"} }, `rule "r1": match.methods[0]: "GE T" is not an HTTP method token`},
		{"method empty", func(r *Rule) { r.Match.Methods = []string{""} }, `match.methods[0]: "" is not an HTTP method token`},
		{"match tier empty", func(r *Rule) { r.Match.Tiers = []string{""} }, `rule "r1": match.tiers[0]: tier "" must be 1 to 64 bytes`},
		{"match tier space", func(r *Rule) { r.Match.Tiers = []string{"a b"} }, "printable ASCII without spaces"},
		{"key missing", func(r *Rule) { r.Key = nil }, `rule "r1": key: required (at least one dimension)`},
		{"key duplicate", func(r *Rule) { r.Key = []string{"ip", "user_id", "ip"} }, `rule "r1": key[2]: duplicate dimension "ip" (also key[0])`},
		{"key unknown", func(r *Rule) { r.Key = []string{"host"} }, `rule "r1": key[0]: "host": unknown dimension`},
		{"key attr empty", func(r *Rule) { r.Key = []string{"attr:"} }, `key[0]: "attr:": attribute name must match`},
		{"key attr bad char", func(r *Rule) { r.Key = []string{"attr:a.b"} }, "attribute name must match"},
		{"ipv6 prefix below the bound", func(r *Rule) { r.IPv6Prefix = 31 }, `rule "r1": ipv6_prefix: must be between 32 and 128`},
		{"ipv6 prefix above 128", func(r *Rule) { r.IPv6Prefix = 129 }, `rule "r1": ipv6_prefix: must be between 32 and 128`},
		{"ipv6 prefix negative", func(r *Rule) { r.IPv6Prefix = -64 }, `rule "r1": ipv6_prefix: must be between 32 and 128`},
		{"ipv6 prefix without ip", func(r *Rule) { r.Key = []string{"user_id"}; r.IPv6Prefix = 56 }, `rule "r1": ipv6_prefix: applies to the ip key dimension only`},
		{"key too many", func(r *Rule) {
			r.Key = []string{"ip", "user_id", "endpoint", "method", "tier", "attr:a", "attr:b", "attr:c", "attr:d"}
		}, `key: at most 8 dimensions`},
		{"algorithm missing", func(r *Rule) { r.Algorithm = "" }, `rule "r1": algorithm: required (fixed_window, sliding_window, sliding_window_counter, token_bucket or concurrency)`},
		{"algorithm unknown", func(r *Rule) { r.Algorithm = "leaky_bucket" }, `rule "r1": algorithm: unknown "leaky_bucket" (want fixed_window, sliding_window, sliding_window_counter, token_bucket or concurrency)`},
		{"limits missing", func(r *Rule) { r.Limits = nil }, `rule "r1": limits: required (1 to 8 limits)`},
		{"limits too many", func(r *Rule) {
			r.Limits = nil
			for i := range 9 {
				r.Limits = append(r.Limits, reqs(5, time.Duration(i+1)*time.Second))
			}
		}, `rule "r1": limits: at most 8 limits`},
		{"per zero", func(r *Rule) { r.Limits = append(r.Limits, reqs(5, 0)) }, `rule "r1": limits[1].per: must be at least 1ms`},
		{"per sub-millisecond", func(r *Rule) { r.Limits[0].Per = dur(1500 * time.Microsecond) }, `rule "r1": limits[0].per: must be a whole number of milliseconds`},
		{"per duplicate", func(r *Rule) { r.Limits = append(r.Limits, reqs(9, time.Second)) }, `rule "r1": limits[1].per: duplicate per 1s (also limits[0])`},
		{"requests zero", func(r *Rule) { r.Limits[0].Requests = 0 }, `rule "r1": limits[0].requests: must be between 1 and 2^53`},
		{"requests huge", func(r *Rule) { r.Limits[0].Requests = 1<<53 + 1 }, `limits[0].requests: must be between 1 and 2^53`},
		{"window with rate", func(r *Rule) { r.Limits[0].Rate = 1 }, `rule "r1": limits[0].rate: not allowed with algorithm sliding_window (use requests)`},
		{"window with burst", func(r *Rule) { r.Algorithm = decide.FixedWindow; r.Limits[0].Burst = 1 }, `limits[0].burst: not allowed with algorithm fixed_window`},
		{"counter with rate", func(r *Rule) { swc(r); r.Limits[0].Rate = 1 }, `rule "r1": limits[0].rate: not allowed with algorithm sliding_window_counter (use requests)`},
		{"counter requests zero", func(r *Rule) { swc(r); r.Limits[0].Requests = 0 }, `rule "r1": limits[0].requests: must be between 1 and 2^53`},
		{"counter requests × per overflow", func(r *Rule) { swc(r); r.Limits[0].Requests = (1<<53)/1000 + 1 }, `rule "r1": limits[0].requests: requests × per (in ms) must be at most 2^53`},
		{"counter tier override overflow", func(r *Rule) {
			swc(r)
			r.Tiers = map[string][]Limit{"VIP": {reqs(1<<43, time.Hour)}}
		}, `rule "r1": tiers.VIP[0].requests: requests × per (in ms) must be at most 2^53`},
		{"counter schedule overflow", func(r *Rule) {
			swc(r)
			r.Schedule = []ScheduleEntry{{Daily: &Daily{From: "09:00", To: "10:00"}, Limits: []Limit{reqs(1<<40, 24*time.Hour)}}}
		}, `rule "r1": schedule[0].limits[0].requests: requests × per (in ms) must be at most 2^53`},
		{"bucket with requests", func(r *Rule) { tb(r); r.Limits[0].Requests = 5 }, `rule "r1": limits[0].requests: not allowed with algorithm token_bucket (use rate and burst)`},
		{"bucket rate zero", func(r *Rule) { tb(r); r.Limits[0].Rate = 0 }, `rule "r1": limits[0].rate: must be between 1 and 2^53`},
		{"bucket burst zero", func(r *Rule) { tb(r); r.Limits[0].Burst = 0 }, `rule "r1": limits[0].burst: must be at least 1`},
		{"bucket burst overflow", func(r *Rule) { tb(r); r.Limits[0].Burst = (1<<53)/1000/1000 + 1 }, `rule "r1": limits[0].burst: burst × 1000 × per (in ms) must be at most 2^53`},
		{"penalty negative", func(r *Rule) { r.Penalty = dur(-time.Second) }, `rule "r1": penalty: must not be negative`},
		{"penalty sub-millisecond", func(r *Rule) { r.Penalty = dur(time.Microsecond) }, `rule "r1": penalty: must be a whole number of milliseconds`},
		{"on_redis_failure", func(r *Rule) { r.OnRedisFailure = "retry" }, `rule "r1": on_redis_failure: unknown "retry" (want local, allow or deny)`},
		{"tier override name", func(r *Rule) { r.Tiers = map[string][]Limit{"": {reqs(1, time.Second)}} }, `rule "r1": tiers: tier "" must be 1 to 64 bytes`},
		{"tier override duplicate", func(r *Rule) {
			r.Tiers = map[string][]Limit{"VIP": {reqs(1, time.Second)}, "vip": {reqs(1, time.Second)}}
		}, `rule "r1": tiers.vip: duplicate tier (also VIP`},
		{"tier override limits", func(r *Rule) { r.Tiers = map[string][]Limit{"VIP": {reqs(1, 0)}} }, `rule "r1": tiers.VIP[0].per: must be at least 1ms`},
		{"tier override empty", func(r *Rule) { r.Tiers = map[string][]Limit{"VIP": nil} }, `rule "r1": tiers.VIP: required`},
		{"tier override wrong kind", func(r *Rule) { tb(r); r.Tiers = map[string][]Limit{"VIP": {reqs(1, time.Second)}} }, `rule "r1": tiers.VIP[0].requests: not allowed with algorithm token_bucket`},
		{"schedule no period", func(r *Rule) { r.Schedule = []ScheduleEntry{{Limits: r.Limits}} }, `rule "r1": schedule[0].from: required (or daily)`},
		{"schedule no to", func(r *Rule) { r.Schedule = []ScheduleEntry{{From: ts("2026-01-01T00:00:00Z"), Limits: r.Limits}} }, `schedule[0].to: required (or daily)`},
		{"schedule to before from", func(r *Rule) {
			r.Schedule = []ScheduleEntry{{From: ts("2026-01-02T00:00:00Z"), To: ts("2026-01-01T00:00:00Z"), Limits: r.Limits}}
		}, `rule "r1": schedule[0].to: must be after from`},
		{"schedule daily and absolute", func(r *Rule) {
			r.Schedule = []ScheduleEntry{{From: ts("2026-01-01T00:00:00Z"), Daily: &Daily{From: "01:00", To: "02:00"}, Limits: r.Limits}}
		}, `schedule[0].daily: cannot be combined with from/to`},
		{"schedule daily bad from", func(r *Rule) {
			r.Schedule = []ScheduleEntry{{Daily: &Daily{From: "25:00", To: "02:00"}, Limits: r.Limits}}
		}, `rule "r1": schedule[0].daily.from: "25:00" must be HH:MM (00:00 to 23:59)`},
		{"schedule daily from 24:00", func(r *Rule) {
			r.Schedule = []ScheduleEntry{{Daily: &Daily{From: "24:00", To: "02:00"}, Limits: r.Limits}}
		}, `schedule[0].daily.from: "24:00" must be HH:MM`},
		{"schedule daily bad to", func(r *Rule) {
			r.Schedule = []ScheduleEntry{{Daily: &Daily{From: "01:00", To: "1:5"}, Limits: r.Limits}}
		}, `schedule[0].daily.to: "1:5" must be HH:MM (00:00 to 24:00)`},
		{"schedule daily empty", func(r *Rule) {
			r.Schedule = []ScheduleEntry{{Daily: &Daily{From: "09:00", To: "09:00"}, Limits: r.Limits}}
		}, `schedule[0].daily.to: must differ from from`},
		{"schedule daily tz", func(r *Rule) {
			r.Schedule = []ScheduleEntry{{Daily: &Daily{From: "09:00", To: "10:00", TZ: "Mars/Olympus"}, Limits: r.Limits}}
		}, `rule "r1": schedule[0].daily.tz: unknown time zone "Mars/Olympus"`},
		{"schedule daily tz of the host", func(r *Rule) {
			r.Schedule = []ScheduleEntry{{Daily: &Daily{From: "09:00", To: "10:00", TZ: "Local"}, Limits: r.Limits}}
		}, `rule "r1": schedule[0].daily.tz: "Local" is the zone of each host`},
		{"schedule limits missing", func(r *Rule) { r.Schedule = []ScheduleEntry{{Daily: &Daily{From: "09:00", To: "10:00"}}} }, `rule "r1": schedule[0].limits: required`},
		{"schedule limits invalid", func(r *Rule) {
			r.Schedule = []ScheduleEntry{{Daily: &Daily{From: "09:00", To: "10:00"}, Limits: []Limit{reqs(0, time.Second)}}}
		}, `rule "r1": schedule[0].limits[0].requests: must be between 1 and 2^53`},
		{"schedule tier override", func(r *Rule) {
			r.Schedule = []ScheduleEntry{{Daily: &Daily{From: "09:00", To: "10:00"}, Limits: r.Limits, Tiers: map[string][]Limit{"VIP": {reqs(1, 0)}}}}
		}, `rule "r1": schedule[0].tiers.VIP[0].per: must be at least 1ms`},
		{"schedule penalty", func(r *Rule) {
			p := dur(-1)
			r.Schedule = []ScheduleEntry{{Daily: &Daily{From: "09:00", To: "10:00"}, Limits: r.Limits, Penalty: &p}}
		}, `rule "r1": schedule[0].penalty: must not be negative`},
		{"escalate triggers zero", func(r *Rule) { r.Escalate = []Escalation{{Within: dur(time.Minute), Penalty: dur(time.Hour)}} }, `rule "r1": escalate[0].triggers: must be between 1 and 1000`},
		{"escalate triggers too many", func(r *Rule) {
			r.Escalate = []Escalation{{Triggers: 1001, Within: dur(time.Minute), Penalty: dur(time.Hour)}}
		}, `escalate[0].triggers: must be between 1 and 1000`},
		{"escalate within zero", func(r *Rule) { r.Escalate = []Escalation{{Triggers: 3, Penalty: dur(time.Hour)}} }, `rule "r1": escalate[0].within: must be at least 1ms`},
		{"escalate penalty zero", func(r *Rule) { r.Escalate = []Escalation{{Triggers: 3, Within: dur(time.Minute)}} }, `rule "r1": escalate[0].penalty: must be at least 1ms`},
		{"escalate to before from", func(r *Rule) {
			r.Escalate = []Escalation{{Triggers: 3, Within: dur(time.Minute), Penalty: dur(time.Hour), From: ts("2026-02-01T00:00:00Z"), To: ts("2026-01-01T00:00:00Z")}}
		}, `rule "r1": escalate[0].to: must be after from`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := baseRule()
			tt.mod(&r)
			err := r.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate() = %v\nwant an error containing %q", err, tt.want)
			}
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("%v is not a *FieldError", err)
			}
		})
	}
}

func TestValidRulesPass(t *testing.T) {
	tests := map[string]func(r *Rule){
		"base": func(*Rule) {},
		"token bucket bound": func(r *Rule) {
			r.Algorithm = decide.TokenBucket
			r.Limits = []Limit{bucket(1, (1<<53)/1000/1000, time.Second)}
		},
		"sliding window counter": func(r *Rule) {
			r.Algorithm = decide.SlidingWindowCounter
			r.Limits = []Limit{reqs(5, time.Second), reqs(100, time.Minute)}
		},
		"sliding window counter bound": func(r *Rule) {
			r.Algorithm = decide.SlidingWindowCounter
			r.Limits = []Limit{reqs((1<<53)/1000, time.Second), reqs((1<<53)/86_400_000, 24*time.Hour)}
		},
		"sliding window log has no per bound": func(r *Rule) {
			r.Limits = []Limit{reqs(1<<53, time.Hour)}
		},
		"daily to 24:00": func(r *Rule) {
			r.Schedule = []ScheduleEntry{{Daily: &Daily{From: "00:00", To: "24:00"}, Limits: r.Limits}}
		},
		"ipv6 prefix at the bound":      func(r *Rule) { r.IPv6Prefix = 32 },
		"ipv6 prefix 128 (no grouping)": func(r *Rule) { r.IPv6Prefix = 128 },
		"ipv6 prefix with a pair key":   func(r *Rule) { r.Key = []string{"user_id", "ip"}; r.IPv6Prefix = 56 },
		"zero penalty":                  func(r *Rule) { r.Penalty = 0 },
		"empty failure":                 func(r *Rule) { r.OnRedisFailure = "" },
		"eight limits": func(r *Rule) {
			r.Limits = nil
			for i := range 8 {
				r.Limits = append(r.Limits, reqs(5, time.Duration(i+1)*time.Second))
			}
		},
		"escalate open ended": func(r *Rule) {
			r.Escalate = []Escalation{{Triggers: 1000, Within: dur(time.Millisecond), Penalty: dur(time.Hour), To: ts("2026-01-01T00:00:00Z")}}
		},
	}
	for name, mod := range tests {
		t.Run(name, func(t *testing.T) {
			r := baseRule()
			mod(&r)
			if err := r.Validate(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	r := baseRule()
	r.Key = nil
	r.Algorithm = "nope"
	r.Limits[0].Per = 0
	r.Escalate = []Escalation{{}}
	fes := FieldErrors(r.Validate())
	got := make([]string, len(fes))
	for i, fe := range fes {
		got[i] = fe.Field
		if fe.RuleID != "r1" {
			t.Errorf("%v: rule id %q", fe, fe.RuleID)
		}
	}
	want := "key algorithm limits[0].per escalate[0].triggers escalate[0].within escalate[0].penalty"
	if strings.Join(got, " ") != want {
		t.Errorf("fields = %v, want %v", got, want)
	}
}

func TestFileValidateErrors(t *testing.T) {
	const ok = "{key: [ip], algorithm: fixed_window, limits: [{requests: 1, per: 1s}]}"
	tests := []struct{ name, yaml, want string }{
		{"duplicate id", "rules:\n  - {id: a, key: [ip], algorithm: fixed_window, limits: [{requests: 1, per: 1s}]}\n  - {id: a, key: [ip], algorithm: fixed_window, limits: [{requests: 1, per: 1s}]}\n", `rule "a": id: duplicate (also rules[0])`},
		{"rule without id named by index", "rules:\n  - {id: a, key: [ip], algorithm: fixed_window, limits: [{requests: 1, per: 1s}]}\n  - " + ok + "\n", "rules[1].id: required"},
		{"rule with bad id named by index", "rules:\n  - {id: 'x y', key: [], algorithm: fixed_window, limits: [{requests: 1, per: 1s}]}\n", "rules[0].key: required"},
		{"null rule", "rules:\n  - {id: a, key: [ip], algorithm: fixed_window, limits: [{requests: 1, per: 1s}]}\n  - null\n", "line 3: rules[1]: empty rule"},
		{"empty rule", "rules:\n  -\n", "rules[0]: empty rule"},
		{"exempt ip", "rules: []\nexempt: {ips: [10.0.0.0/8, 300.1.1.1]}\n", `exempt.ips[1]: "300.1.1.1" is not an IP address or CIDR`},
		{"exempt cidr", "rules: []\nexempt: {ips: [10.0.0.0/33]}\n", `exempt.ips[0]: "10.0.0.0/33" is not an IP address or CIDR`},
		{"exempt endpoint", "rules: []\nexempt: {endpoints: [healthz]}\n", `exempt.endpoints[0]: "healthz": must start with /`},
		{"exempt tier", "rules: []\nexempt: {tiers: ['']}\n", `exempt.tiers[0]: tier "" must be 1 to 64 bytes`},
		{"exempt user", "rules: []\nexempt: {users: ['']}\n", `exempt.users[0]: must not be empty`},
		{"warn violations", "rules: []\ndetection: {warn: {violations: 0, within: 5m}}\n", "detection.warn.violations: must be at least 1"},
		{"warn within", "rules: []\ndetection: {warn: {violations: 1, within: 0s}}\n", "detection.warn.within: must be at least 1ms"},
		{"ban within", "rules: []\ndetection: {ban: [{violations: 1, within: 1h, duration: 1h}, {violations: 1, within: 0s, duration: 1h}]}\n", "detection.ban[1].within: must be at least 1ms"},
		{"ban duration", "rules: []\ndetection: {ban: [{violations: 1, within: 1h}]}\n", "detection.ban[0].duration: must be at least 1ms"},
		{"scan distinct", "rules: []\ndetection: {scan: {distinct_endpoints: 0, within: 10s, duration: 1h}}\n", "detection.scan.distinct_endpoints: must be at least 1"},
		{"grace negative", "rules: []\ndetection: {grace: -1s}\n", "detection.grace: must be at least 1ms"},
		{"grace sub-millisecond", "rules: []\ndetection: {grace: 10us}\n", "detection.grace: must be at least 1ms"},
		{"escalation factor", "rules: []\ndetection: {escalation: {factor: -1}}\n", "detection.escalation.factor: must be at least 1"},
		{"escalation cap", "rules: []\ndetection: {escalation: {cap: -1h}}\n", "detection.escalation.cap: must be at least 1ms"},
		{"escalation period", "rules: []\ndetection: {escalation: {period: 1us}}\n", "detection.escalation.period: must be at least 1ms"},
		{"samples too many", "rules: []\ndetection: {samples: 51}\n", "detection.samples: must be between 1 and 50"},
		{"samples negative", "rules: []\ndetection: {samples: -1}\n", "detection.samples: must be between 1 and 50"},
		{"ipv6 prefix too short", "rules: []\ndetection: {ipv6_prefix: 16}\n", "detection.ipv6_prefix: must be between 32 and 128"},
		{"ipv6 prefix too long", "rules: []\ndetection: {ipv6_prefix: 129}\n", "detection.ipv6_prefix: must be between 32 and 128"},
		{"rule ipv6 prefix", "rules:\n  - {id: a, key: [ip], algorithm: fixed_window, limits: [{requests: 1, per: 1s}], ipv6_prefix: 8}\n", `rule "a": ipv6_prefix: must be between 32 and 128`},
		{"max_clock_skew negative", "rules: []\ndetection: {max_clock_skew: -1s}\n", "detection.max_clock_skew: must be between 1ms and 1h"},
		{"max_clock_skew sub-millisecond", "rules: []\ndetection: {max_clock_skew: 10us}\n", "detection.max_clock_skew: must be between 1ms and 1h"},
		{"max_clock_skew over an hour", "rules: []\ndetection: {max_clock_skew: 61m}\n", "detection.max_clock_skew: must be between 1ms and 1h"},
		{"escalation unknown field", "rules: []\ndetection: {escalation: {base: 2}}\n", `line 2: unknown key "base" (valid keys: cap, factor, period)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Parse error = %v\nwant it to contain %q", err, tt.want)
			}
		})
	}
}
