package rules

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ratewarden/ratewarden/internal/decide"
)

const leaseRuleYAML = "rules:\n  - id: hot\n    key: [ip]\n    algorithm: fixed_window\n    limits: [{requests: 6400, per: 1m}]\n"

// Both forms of lease, in the rules file and as JSON: the bool shorthand
// and the mapping; false, null and absent are off (no Lease).
func TestParseLease(t *testing.T) {
	tests := []struct {
		name, yaml, json string
		want             *Lease
	}{
		{"absent", "", "", nil},
		{"true", "    lease: true\n", `, "lease": true`, &Lease{}},
		{"false", "    lease: false\n", `, "lease": false`, nil},
		{"null", "    lease:\n", `, "lease": null`, nil},
		{"empty mapping", "    lease: {}\n", `, "lease": {}`, &Lease{}},
		{"max_units", "    lease:\n      max_units: 500\n", `, "lease": {"max_units": 500}`, &Lease{MaxUnits: 500}},
		{"max_units flow", "    lease: {max_units: 100}\n", `, "lease": { "max_units": 100 }`, &Lease{MaxUnits: 100}},
	}
	for _, tt := range tests {
		t.Run(tt.name+" YAML", func(t *testing.T) {
			f := mustParse(t, leaseRuleYAML+tt.yaml)
			if got := f.Rules[0].Lease; !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Lease = %+v, want %+v", got, tt.want)
			}
			if got := f.Rules[0].Leased(); got != (tt.want != nil) {
				t.Errorf("Leased() = %v", got)
			}
		})
		t.Run(tt.name+" JSON", func(t *testing.T) {
			r, err := ParseRuleJSON([]byte(`{"id": "hot", "key": ["ip"], "algorithm": "fixed_window",
				"limits": [{"requests": 6400, "per": "1m"}]` + tt.json + "}"))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(r.Lease, tt.want) {
				t.Errorf("Lease = %+v, want %+v", r.Lease, tt.want)
			}
		})
	}
}

// Decoding stays strict: anything but a bool or a mapping of max_units is
// refused, and so is max_units: 0 (write nothing for the default).
func TestParseLeaseErrors(t *testing.T) {
	yamlTests := []struct{ name, yaml, want string }{
		{"number", "    lease: 5\n", `rule "hot": line 6: lease must be true, false or a mapping such as {max_units: 500}`},
		{"yes is not a bool", "    lease: yes\n", "line 6: lease must be true, false"},
		{"string", "    lease: \"true\"\n", "line 6: lease must be true, false"},
		{"list", "    lease: [1]\n", "line 6: lease must be true, false"},
		{"unknown field", "    lease: {max_unit: 5}\n", `rule "hot": line 6: lease: unknown key "max_unit" (did you mean "max_units"?)`},
		{"max_units zero", "    lease: {max_units: 0}\n", `rule "hot": line 6: lease.max_units: must be at least 1 (leave max_units out for the default)`},
		{"max_units not a number", "    lease: {max_units: lots}\n", `rule "hot": line 6: lease.max_units: want an integer`},
		{"max_units not whole", "    lease: {max_units: 1.5}\n", `rule "hot": line 6: lease.max_units: want an integer`},
		{"every problem", "    lease: 5\n  - {id: b, key: [ip], algorithm: fixed_window, limits: [{requests: 1, per: 1s}], lease: {x: 1}}\n",
			"rule \"hot\": line 6: lease must be true, false or a mapping such as {max_units: 500}\nrule \"b\": line 7: lease: unknown key \"x\" (valid keys: max_units)"},
	}
	for _, tt := range yamlTests {
		t.Run(tt.name+" YAML", func(t *testing.T) {
			_, err := Parse([]byte(leaseRuleYAML + tt.yaml))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Parse error = %v, want it to contain %q", err, tt.want)
			}
		})
	}
	jsonTests := []struct{ name, lease, want string }{
		{"number", "5", `lease: cannot use 5: want true, false or an object such as {"max_units": 500}`},
		{"string", `"true"`, `lease: cannot use "true": want true, false`},
		{"unknown field", `{"max_unit": 5}`, `lease: unknown field "max_unit"`},
		{"max_units zero", `{"max_units": 0}`, "lease.max_units: must be at least 1 (leave max_units out for the default)"},
		{"max_units as string", `{"max_units": "5"}`, "lease.max_units: cannot use string: want an integer"},
	}
	for _, tt := range jsonTests {
		t.Run(tt.name+" JSON", func(t *testing.T) {
			_, err := ParseRuleJSON([]byte(`{"id": "hot", "key": ["ip"], "algorithm": "fixed_window",
				"limits": [{"requests": 6400, "per": "1m"}], "lease": ` + tt.lease + "}"))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("ParseRuleJSON error = %v, want it to contain %q", err, tt.want)
			}
			if strings.Contains(tt.want, "lease") && len(FieldErrors(err)) != 1 {
				t.Errorf("%v: want one FieldError", err)
			}
		})
	}
}

// A lease marshals to the form it is read from: true for the defaults,
// the mapping with max_units; what is read back is the same rule.
func TestLeaseRoundTrip(t *testing.T) {
	for _, tt := range []struct {
		lease     *Lease
		json, yml string
	}{
		{&Lease{}, `"lease":true`, "lease: true\n"},
		{&Lease{MaxUnits: 500}, `"lease":{"max_units":500}`, "lease:\n        max_units: 500\n"},
		{&Lease{off: true}, `"lease":false`, "lease: false\n"},
	} {
		t.Run(tt.json, func(t *testing.T) {
			r := mustParse(t, leaseRuleYAML).Rules[0]
			r.Lease = tt.lease
			data, err := json.Marshal(r)
			if err != nil || !strings.Contains(string(data), tt.json) {
				t.Fatalf("JSON = %s (%v), want %s in it", data, err, tt.json)
			}
			back, err := ParseRuleJSON(data)
			if err != nil {
				t.Fatal(err)
			}
			want := r
			want.dropOffLease()
			if !reflect.DeepEqual(back, want) {
				t.Errorf("JSON round trip = %+v, want %+v", back.Lease, want.Lease)
			}
			out, err := yaml.Marshal(&File{Rules: []Rule{r}})
			if err != nil || !strings.Contains(string(out), tt.yml) {
				t.Fatalf("YAML =\n%s(%v), want %q in it", out, err, tt.yml)
			}
			f := mustParse(t, string(out))
			if !reflect.DeepEqual(f.Rules[0], want) {
				t.Errorf("YAML round trip = %+v, want %+v", f.Rules[0].Lease, want.Lease)
			}
		})
	}
}

func TestLeaseValidateErrors(t *testing.T) {
	lease := func(r *Rule) { r.Algorithm = decide.FixedWindow; r.Lease = &Lease{} }
	daily := &Daily{From: "09:00", To: "10:00"}
	tests := []struct {
		name string
		mod  func(r *Rule)
		want string
	}{
		{"sliding window log", func(r *Rule) { r.Lease = &Lease{} },
			`rule "r1": lease: not with algorithm sliding_window: the sliding window log records the time of each request; ` +
				"a leased unit is spent at another time than it was debited, so the log would no longer be exact per request " +
				"— use sliding_window_counter"},
		{"penalty", func(r *Rule) { lease(r); r.Penalty = dur(time.Minute) },
			`rule "r1": lease: not with penalty: a penalty must stop every instance at once, while other instances keep serving the units they hold`},
		{"escalate", func(r *Rule) {
			lease(r)
			r.Escalate = []Escalation{{Triggers: 3, Within: dur(time.Minute), Penalty: dur(time.Hour)}}
		}, `rule "r1": lease: not with escalate: a penalty must stop every instance at once`},
		{"schedule penalty", func(r *Rule) {
			lease(r)
			p, none := dur(time.Minute), dur(0)
			r.Schedule = []ScheduleEntry{{Daily: daily, Limits: r.Limits, Penalty: &none}, {Daily: daily, Limits: r.Limits, Penalty: &p}}
		}, `rule "r1": lease: not with schedule[1].penalty: a penalty must stop every instance at once`},
		{"every penalty named", func(r *Rule) {
			lease(r)
			r.Penalty = dur(time.Minute)
			r.Escalate = []Escalation{{Triggers: 3, Within: dur(time.Minute), Penalty: dur(time.Hour)}}
		}, `lease: not with penalty, escalate:`},
		{"spent by reports", func(r *Rule) { lease(r); r.SpentBy = SpentByReport },
			`rule "r1": lease: not with spent_by: report: its checks only ask whether a unit is left and reports debit denied calls one by one`},
		{"max_units negative", func(r *Rule) { lease(r); r.Lease.MaxUnits = -1 }, `rule "r1": lease.max_units: must be at least 1`},
		{"max_units over the quota", func(r *Rule) { lease(r); r.Lease.MaxUnits = 6 },
			`rule "r1": lease.max_units: 6 is more than 5, the smallest quota of the rule's limits (requests, or burst for token_bucket; tiers and schedule entries included)`},
		{"max_units over a second limit", func(r *Rule) {
			lease(r)
			r.Limits = []Limit{reqs(100, time.Second), reqs(50, time.Minute)}
			r.Lease.MaxUnits = 60
		}, "lease.max_units: 60 is more than 50"},
		{"max_units over a tier", func(r *Rule) {
			lease(r)
			r.Limits[0].Requests = 100
			r.Tiers = map[string][]Limit{"FREE": {reqs(10, time.Second)}, "VIP": {reqs(1000, time.Second)}}
			r.Lease.MaxUnits = 20
		}, "lease.max_units: 20 is more than 10"},
		{"max_units over a schedule tier", func(r *Rule) {
			lease(r)
			r.Limits[0].Requests = 100
			r.Schedule = []ScheduleEntry{{Daily: daily, Limits: []Limit{reqs(80, time.Second)},
				Tiers: map[string][]Limit{"FREE": {reqs(8, time.Second)}}}}
			r.Lease.MaxUnits = 9
		}, "lease.max_units: 9 is more than 8"},
		{"max_units over a burst", func(r *Rule) {
			r.Algorithm = decide.TokenBucket
			r.Limits = []Limit{bucket(100, 20, time.Second)}
			r.Lease = &Lease{MaxUnits: 21}
		}, "lease.max_units: 21 is more than 20"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := baseRule()
			tt.mod(&r)
			err := r.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate() = %v\nwant an error containing %q", err, tt.want)
			}
			if n := len(FieldErrors(err)); n != 1 {
				t.Errorf("%d field errors, want 1:\n%v", n, err)
			}
		})
	}
}

func TestLeaseValidRules(t *testing.T) {
	tests := map[string]func(r *Rule){
		"fixed window":           func(r *Rule) { r.Algorithm = decide.FixedWindow },
		"sliding window counter": func(r *Rule) { r.Algorithm = decide.SlidingWindowCounter },
		"token bucket up to its burst": func(r *Rule) {
			r.Algorithm = decide.TokenBucket
			r.Limits = []Limit{bucket(1, 20, time.Second), bucket(100, 40, time.Minute)}
			r.Lease.MaxUnits = 20
		},
		"max_units at the smallest quota": func(r *Rule) {
			r.Algorithm = decide.FixedWindow
			r.Tiers = map[string][]Limit{"VIP": {reqs(50, time.Second)}}
			r.Lease.MaxUnits = 5
		},
		"schedule without penalty": func(r *Rule) {
			r.Algorithm = decide.FixedWindow
			none := dur(0)
			r.Schedule = []ScheduleEntry{{Daily: &Daily{From: "09:00", To: "10:00"}, Limits: r.Limits, Penalty: &none}}
		},
		"debit always and shadow": func(r *Rule) { r.Algorithm = decide.FixedWindow; r.Debit = DebitAlways; r.Shadow = true },
		"spent by checks":         func(r *Rule) { r.Algorithm = decide.FixedWindow; r.SpentBy = SpentByCheck },
		"written false with a penalty": func(r *Rule) {
			r.Lease.off = true // what lease: false decodes to, before Parse drops it
			r.Penalty = dur(time.Minute)
		},
	}
	for name, mod := range tests {
		t.Run(name, func(t *testing.T) {
			r := baseRule()
			r.Lease = &Lease{}
			mod(&r)
			if err := r.Validate(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Descriptor rules lease too (they debit denied calls, which leases
// allow); one that Redis never decides has nothing to lease.
func TestLeaseDescriptorRules(t *testing.T) {
	for _, tt := range []struct{ name, descriptor, limits, want string }{
		{"counting", "", "[{requests: 100, per: 1s}]", ""},
		{"unlimited", ", unlimited: true", "[]",
			`rule "d": lease: not with unlimited: an unlimited rate limit is answered without Redis, there is no budget to lease`},
		{"0 requests", "", "[{requests: 0, per: 1s}]", `rule "d": lease: not with 0 requests: such a rate limit denies without Redis`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Parse(fmt.Appendf(nil, "rules:\n  - {id: d, descriptor: {domain: api, entries: [{key: k}]%s}, "+
				"algorithm: fixed_window, limits: %s, lease: true}\n", tt.descriptor, tt.limits))
			switch {
			case tt.want != "":
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("Parse error = %v, want it to contain %q", err, tt.want)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			set, err := Compile(f, Options{})
			if err != nil {
				t.Fatal(err)
			}
			as := set.MatchDescriptors(&DescriptorRequest{Domain: "api", Descriptors: []Descriptor{{Entries: []Entry{{"k", "v"}}, Cost: 1}}}, time.Now(), nil)
			if len(as) != 1 || !as[0].Call.Leased || !as[0].Call.DebitDenied {
				t.Fatalf("applied %+v, want one leased call that debits denied calls", as)
			}
			if err := as[0].Call.Validate(); err != nil {
				t.Errorf("call does not validate: %v", err)
			}
		})
	}
}

// Every call a leased rule produces is leased: base limits, tier
// overrides, schedule entries (and their tiers); a rule without lease
// produces none.
func TestMatchLeased(t *testing.T) {
	set := mustCompile(t, `
rules:
  - id: hot
    key: [ip]
    algorithm: sliding_window_counter
    limits: [{requests: 6400, per: 1m}, {requests: 100000, per: 1h}]
    tiers:
      VIP: [{requests: 64000, per: 1m}]
    schedule:
      - daily: {from: "09:00", to: "10:00"}
        limits: [{requests: 640, per: 1m}]
        tiers:
          VIP: [{requests: 6400, per: 1m}]
    lease: true
  - id: sized
    key: [ip]
    algorithm: token_bucket
    limits: [{rate: 10, per: 1s, burst: 100}]
    lease: {max_units: 30}
  - id: plain
    key: [ip]
    algorithm: fixed_window
    limits: [{requests: 10, per: 1s}]
    lease: false
`)
	outside, inside := mustTime(t, "2026-11-27T08:00:00Z"), mustTime(t, "2026-11-27T09:30:00Z")
	for _, tt := range []struct {
		name    string
		tier    string
		now     time.Time
		limit   int64 // of hot's first limit
		leaseOf int64 // hot's LeaseMax for the call's limits
	}{
		{"base", "", outside, 6400, 100},
		{"tier", "VIP", outside, 64000, 1000},
		{"schedule", "", inside, 640, 10},
		{"schedule tier", "vip", inside, 6400, 100},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := request("203.0.113.9", "/api")
			r.Tier = tt.tier
			as := set.Match(r, tt.now, nil)
			if got := ids(as); !slices.Equal(got, []string{"hot", "plain", "sized"}) {
				t.Fatalf("applied %v", got)
			}
			for _, a := range as {
				if want := a.Rule.ID != "plain"; a.Call.Leased != want || a.Rule.Leased() != want {
					t.Errorf("%s: Call.Leased %v, Rule.Leased() %v, want %v", a.Rule.ID, a.Call.Leased, a.Rule.Leased(), want)
				}
				if err := a.Call.Validate(); err != nil {
					t.Errorf("%s: call does not validate: %v", a.Rule.ID, err)
				}
			}
			hot := as[0]
			if hot.Call.Limits[0].Requests != tt.limit {
				t.Errorf("hot's limits %+v, want %d first", hot.Call.Limits, tt.limit)
			}
			if got := hot.Rule.LeaseMax(hot.Call.Limits); got != tt.leaseOf {
				t.Errorf("hot: LeaseMax = %d, want %d", got, tt.leaseOf)
			}
			if got := as[2].Rule.LeaseMax(as[2].Call.Limits); got != 30 {
				t.Errorf("sized: LeaseMax = %d, want 30", got)
			}
			if got := as[1].Rule.LeaseMax(as[1].Call.Limits); got != 0 || as[1].Rule.Lease != nil {
				t.Errorf("plain: LeaseMax = %d, Lease %+v; want 0 and none", got, as[1].Rule.Lease)
			}
		})
	}
}

func TestLeaseMax(t *testing.T) {
	limits := func(qs ...int64) []decide.Limit {
		var out []decide.Limit
		for i, q := range qs {
			out = append(out, decide.Limit{Requests: q, Per: time.Duration(i+1) * time.Second})
		}
		return out
	}
	for _, tt := range []struct {
		name   string
		lease  *Lease
		limits []decide.Limit
		want   int64
	}{
		{"not leased", nil, limits(6400), 0},
		{"written false", &Lease{off: true}, limits(6400), 0},
		{"q/64", &Lease{}, limits(6400), 100},
		{"q/64 rounds down", &Lease{}, limits(6463), 100},
		{"smallest quota", &Lease{}, limits(64000, 640, 6400), 10},
		{"at least 1", &Lease{}, limits(63), 1},
		{"quota 1", &Lease{}, limits(1), 1},
		{"bucket burst", &Lease{}, []decide.Limit{{Rate: 10000, Burst: 128, Per: time.Second}}, 2},
		{"max_units", &Lease{MaxUnits: 500}, limits(6400), 500},
		{"max_units beyond the default", &Lease{MaxUnits: 3}, limits(64), 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := &Rule{Lease: tt.lease}
			if got := r.LeaseMax(tt.limits); got != tt.want {
				t.Errorf("LeaseMax = %d, want %d", got, tt.want)
			}
		})
	}
}

// The Set keeps its own lease: changing the file's after Compile changes
// nothing.
func TestCompileCopiesLease(t *testing.T) {
	f := mustParse(t, leaseRuleYAML+"    lease: {max_units: 7}\n")
	set, err := Compile(f, Options{})
	if err != nil {
		t.Fatal(err)
	}
	f.Rules[0].Lease.MaxUnits = 9
	if got := set.Rule("hot").Lease.MaxUnits; got != 7 {
		t.Errorf("compiled max_units = %d after the file's changed, want 7", got)
	}
}

// A descriptor's own limit counts on the counter of the fixed window it
// matches, except a leased one's: its units are held by limiters.
func TestOverrideDoesNotShareALeasedCounter(t *testing.T) {
	set := mustCompile(t, `
rules:
  - {id: plain, descriptor: {domain: api, entries: [{key: a}]}, algorithm: fixed_window, limits: [{requests: 10, per: 1s}]}
  - {id: leased, descriptor: {domain: api, entries: [{key: b}]}, algorithm: fixed_window, limits: [{requests: 10, per: 1s}], lease: true}
`)
	for _, tt := range []struct {
		key   string
		share bool
	}{{"a", true}, {"b", false}} {
		d := Descriptor{Entries: []Entry{{tt.key, "v"}}, Cost: 1}
		own := set.MatchDescriptors(&DescriptorRequest{Domain: "api", Descriptors: []Descriptor{d}}, time.Now(), nil)[0]
		d.Limit = &DescriptorLimit{Requests: 5, Per: time.Second}
		over := set.MatchDescriptors(&DescriptorRequest{Domain: "api", Descriptors: []Descriptor{d}}, time.Now(), nil)[0]
		if over.Call.Leased || !strings.HasPrefix(over.Rule.ID, overrideIDPrefix) {
			t.Errorf("%s: override %s, leased %v", tt.key, over.Rule.ID, over.Call.Leased)
		}
		if shared := over.Call.Keys == own.Call.Keys; shared != tt.share {
			t.Errorf("%s: override keys %+v, rule's %+v; shared %v, want %v", tt.key, over.Call.Keys, own.Call.Keys, shared, tt.share)
		}
	}
}
