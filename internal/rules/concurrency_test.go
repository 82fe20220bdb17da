package rules

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
)

func concurrencyRule() Rule {
	return Rule{ID: "exports", Priority: 100, Key: []string{"attr:customer"}, Algorithm: decide.Concurrency,
		Limits: []Limit{{Concurrent: 5, Hold: dur(10 * time.Minute)}}, OnRedisFailure: FailLocal}
}

func TestConcurrencyRuleValidateErrors(t *testing.T) {
	ok := Limit{Concurrent: 5, Hold: dur(time.Minute)}
	tests := []struct {
		name string
		mod  func(r *Rule)
		want string
	}{
		{"two limits", func(r *Rule) { r.Limits = []Limit{ok, ok} }, `limits: a concurrency rule has exactly one limit`},
		{"no limit", func(r *Rule) { r.Limits = nil }, `limits: required`},
		{"concurrent zero", func(r *Rule) { r.Limits[0].Concurrent = 0 }, `limits[0].concurrent: must be between 1 and 1000000`},
		{"concurrent too many", func(r *Rule) { r.Limits[0].Concurrent = 1_000_001 }, `limits[0].concurrent: must be between 1 and 1000000`},
		{"hold too short", func(r *Rule) { r.Limits[0].Hold = dur(999 * time.Millisecond) }, `limits[0].hold: must be between 1s and 24h`},
		{"hold too long", func(r *Rule) { r.Limits[0].Hold = dur(24*time.Hour + time.Second) }, `limits[0].hold: must be between 1s and 24h`},
		{"hold negative", func(r *Rule) { r.Limits[0].Hold = dur(-time.Second) }, `limits[0].hold: must be between 1s and 24h`},
		{"hold sub-millisecond", func(r *Rule) { r.Limits[0].Hold = dur(time.Second + time.Microsecond) }, `limits[0].hold: must be a whole number of milliseconds`},
		{"requests", func(r *Rule) { r.Limits[0].Requests = 5 }, `limits[0].requests: not allowed with algorithm concurrency (use concurrent and hold)`},
		{"per", func(r *Rule) { r.Limits[0].Per = dur(time.Second) }, `limits[0].per: not allowed with algorithm concurrency`},
		{"rate and burst", func(r *Rule) { r.Limits[0].Rate, r.Limits[0].Burst = 1, 2 }, `limits[0].burst: not allowed with algorithm concurrency`},
		{"concurrent on a window rule", func(r *Rule) {
			r.Algorithm = decide.FixedWindow
			r.Limits = []Limit{{Requests: 5, Per: dur(time.Second), Concurrent: 5}}
		}, `limits[0].concurrent: not allowed with algorithm fixed_window`},
		{"hold on a bucket rule", func(r *Rule) {
			r.Algorithm = decide.TokenBucket
			r.Limits = []Limit{{Rate: 1, Burst: 5, Per: dur(time.Second), Hold: dur(time.Minute)}}
		}, `limits[0].hold: not allowed with algorithm token_bucket`},
		{"penalty", func(r *Rule) { r.Penalty = dur(time.Minute) }, `penalty: not allowed with algorithm concurrency`},
		{"escalate", func(r *Rule) {
			r.Escalate = []Escalation{{Triggers: 3, Within: dur(time.Minute), Penalty: dur(time.Hour)}}
		}, `escalate: not allowed with algorithm concurrency`},
		{"lease", func(r *Rule) { r.Lease = &Lease{} }, `lease: not allowed with algorithm concurrency: a hold must be in Redis so that whichever limiter the report reaches can release it`},
		{"debit", func(r *Rule) { r.Debit = DebitAlways }, `debit: not allowed with algorithm concurrency`},
		{"spent_by", func(r *Rule) { r.SpentBy = SpentByReport }, `spent_by: not allowed with algorithm concurrency`},
		{"statuses", func(r *Rule) { r.Statuses = []int{200} }, `statuses: not allowed with algorithm concurrency`},
		{"schedule penalty", func(r *Rule) {
			p := dur(time.Minute)
			r.Schedule = []ScheduleEntry{{Daily: &Daily{From: "00:00", To: "06:00"}, Limits: r.Limits, Penalty: &p}}
		}, `schedule[0].penalty: not allowed with algorithm concurrency`},
		{"schedule of rate limits", func(r *Rule) {
			r.Schedule = []ScheduleEntry{{Daily: &Daily{From: "00:00", To: "06:00"}, Limits: []Limit{reqs(5, time.Second)}}}
		}, `schedule[0].limits[0].concurrent: must be between 1 and 1000000`},
		{"tier of rate limits", func(r *Rule) { r.Tiers = map[string][]Limit{"VIP": {reqs(5, time.Second)}} }, `tiers.VIP[0].requests: not allowed with algorithm concurrency`},
		{"unknown release", func(r *Rule) {
			r.Key = nil
			r.Descriptor = &DescriptorMatch{Domain: "d", Entries: []DescriptorEntry{{Key: "k"}}, Release: "newest"}
		}, `descriptor.release: unknown "newest" (want hold_id or oldest)`},
		{"release of a window rule", func(r *Rule) {
			r.Key, r.Algorithm, r.Limits = nil, decide.FixedWindow, []Limit{reqs(5, time.Second)}
			r.Descriptor = &DescriptorMatch{Domain: "d", Entries: []DescriptorEntry{{Key: "k"}}, Release: ReleaseOldest}
		}, `descriptor.release: only with algorithm concurrency`},
		{"unlimited", func(r *Rule) {
			r.Key = nil
			r.Descriptor = &DescriptorMatch{Domain: "d", Entries: []DescriptorEntry{{Key: "k"}}, Unlimited: true}
		}, `descriptor.unlimited: not allowed with limits`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := concurrencyRule()
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

func TestConcurrencyRuleValid(t *testing.T) {
	tests := map[string]func(r *Rule){
		"base":          func(*Rule) {},
		"default hold":  func(r *Rule) { r.Limits[0].Hold = 0 },
		"bounds":        func(r *Rule) { r.Limits = []Limit{{Concurrent: 1_000_000, Hold: dur(24 * time.Hour)}} },
		"lower bounds":  func(r *Rule) { r.Limits = []Limit{{Concurrent: 1, Hold: dur(time.Second)}} },
		"shadow":        func(r *Rule) { r.Shadow = true },
		"tier override": func(r *Rule) { r.Tiers = map[string][]Limit{"VIP": {{Concurrent: 50}}} },
		"failure deny":  func(r *Rule) { r.OnRedisFailure = FailDeny },
		"lease false":   func(r *Rule) { r.Lease = &Lease{off: true} },
		"debit empty":   func(r *Rule) { r.Debit = "" },
		"descriptor": func(r *Rule) {
			r.Key = nil
			r.Descriptor = &DescriptorMatch{Domain: "d", Entries: []DescriptorEntry{{Key: "k"}}, Release: ReleaseOldest}
		},
		"schedule entry": func(r *Rule) {
			r.Schedule = []ScheduleEntry{{Daily: &Daily{From: "00:00", To: "06:00"}, Limits: []Limit{{Concurrent: 1}}}}
		},
	}
	for name, mod := range tests {
		t.Run(name, func(t *testing.T) {
			r := concurrencyRule()
			mod(&r)
			if err := r.Validate(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

const holdsYAML = `
rules:
  - id: exports
    match: {endpoints: ["/api/exports/**"]}
    key: ["attr:customer"]
    algorithm: concurrency
    limits: [{concurrent: 5, hold: 10m}]
    tiers:
      VIP: [{concurrent: 50}]
  - id: per-ip
    key: [ip]
    algorithm: fixed_window
    limits: [{requests: 100, per: 1m}]
`

func TestConcurrencyRuleCompiles(t *testing.T) {
	s := mustCompile(t, holdsYAML)
	r := request("203.0.113.9", "/api/exports/7")
	r.Attributes, r.Cost = map[string]string{"customer": "c-1"}, 3
	as := s.Match(r, time.Now(), nil)
	if got := ids(as); !reflect.DeepEqual(got, []string{"exports", "per-ip"}) {
		t.Fatalf("applied %v", got)
	}
	want := decide.Call{
		Keys: decide.Keys{
			State: "rw:{exports|attr:customer=c-1}:cc",
			Hold:  "rw:{exports|attr:customer=c-1}:hold",
			Hits:  "rw:{exports|attr:customer=c-1}:hits",
		},
		Algorithm: decide.Concurrency,
		Limits:    []decide.Limit{{Requests: 5, Per: 10 * time.Minute}},
		Cost:      1, // a hold, whatever the request's cost
	}
	if !reflect.DeepEqual(as[0].Call, want) {
		t.Errorf("call = %+v\nwant   %+v", as[0].Call, want)
	}
	if as[1].Call.Cost != 3 {
		t.Errorf("the other rule's cost = %d, want the request's 3", as[1].Call.Cost)
	}

	r.Tier = "vip"
	if l := s.Match(r, time.Now(), nil)[0].Call.Limits; !reflect.DeepEqual(l, []decide.Limit{{Requests: 50, Per: DefaultHold}}) {
		t.Errorf("VIP limits = %+v, want 50 holds of the default lifetime", l)
	}

	hold := decide.NewHoldID()
	rel := s.MatchHolds(r, hold, time.Now(), nil)
	if len(rel) != 1 || rel[0].Rule.ID != "exports" || !rel[0].Call.Release || rel[0].Call.HoldID != hold ||
		rel[0].Call.Cost != 0 || rel[0].Call.Keys.State != want.Keys.State {
		t.Errorf("MatchHolds = %+v, want one release of %s on %s", rel, hold, want.Keys.State)
	}
	if !s.HasHoldRules() {
		t.Error("HasHoldRules = false")
	}
	other := request("203.0.113.9", "/api/books/7")
	other.Attributes = map[string]string{"customer": "c-1"}
	if rel := s.MatchHolds(other, hold, time.Now(), nil); len(rel) != 0 {
		t.Errorf("MatchHolds of a subject no concurrency rule applies to = %v", ids(rel))
	}
}

func TestConcurrencyRuleJSONRoundTrip(t *testing.T) {
	r, err := ParseRuleJSON([]byte(`{"id": "exports", "key": ["attr:customer"], "algorithm": "concurrency",
		"limits": [{"concurrent": 5, "hold": "10m"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := (Limit{Concurrent: 5, Hold: dur(10 * time.Minute)}); !reflect.DeepEqual(r.Limits, []Limit{want}) {
		t.Errorf("limits = %+v", r.Limits)
	}
}
