package rules

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
)

func TestValidateReserve(t *testing.T) {
	for _, tc := range []struct{ name, alg, extra, want string }{
		{"without spent_by report", "fixed_window", "reserve: 2", "reserve: only with spent_by: report"},
		{"negative", "fixed_window", "spent_by: report\n    reserve: -1", "reserve: must be 1 to 1000000 units"},
		{"above the bound", "fixed_window", "spent_by: report\n    reserve: 1000001", "reserve: must be 1 to 1000000 units"},
		{"above the limit", "fixed_window", "spent_by: report\n    reserve: 6", "reserve: 6 is more than 5, the smallest quota"},
		{"above a tier's limit", "fixed_window", "spent_by: report\n    reserve: 4\n    tiers: {FREE: [{requests: 3, per: 1m}]}", "reserve: 4 is more than 3"},
		{"sliding window", "sliding_window", "spent_by: report\n    reserve: 2", "reserve: not with algorithm sliding_window"},
		{"sliding window counter", "sliding_window_counter", "spent_by: report\n    reserve: 2", "reserve: not with algorithm sliding_window_counter"},
		{"hold without reserve", "fixed_window", "spent_by: report\n    reserve_hold: 1m", "reserve_hold: only with reserve"},
		{"hold too short", "fixed_window", "spent_by: report\n    reserve: 2\n    reserve_hold: 500ms", "reserve_hold: must be at least 1s"},
		{"hold too long", "fixed_window", "spent_by: report\n    reserve: 2\n    reserve_hold: 25h", "reserve_hold: must be at most 24h0m0s"},
		{"lease", "fixed_window", "spent_by: report\n    reserve: 2\n    lease: true", "lease: not with spent_by: report"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(`
rules:
  - id: r
    key: [ip]
    algorithm: ` + tc.alg + `
    limits: [{requests: 5, per: 1m}]
    ` + tc.extra + "\n"))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

// A check of a rule that reserves takes its estimate (the check's own,
// else the rule's) for the rule's reservation lifetime; a report settles
// the reservation its hold names, with its cost when its status spends
// the rule and 0 when not; without a hold it debits as before.
func TestMatchReserve(t *testing.T) {
	set := mustCompile(t, `
rules:
  - id: llm
    match: {endpoints: ["/v1/chat/**"]}
    key: ["attr:api_key"]
    algorithm: token_bucket
    limits: [{rate: 100, per: 1s, burst: 4000}]
    spent_by: report
    statuses: [200]
    reserve: 1000
    reserve_hold: 2m
  - id: probed
    match: {endpoints: ["/v1/chat/**"]}
    key: ["attr:api_key"]
    algorithm: fixed_window
    limits: [{requests: 10, per: 1m}]
    spent_by: report
`)
	now := time.Now()
	req := &Request{IP: "203.0.113.7", Endpoint: "/v1/chat/x", Method: "POST", Cost: 1, Attributes: map[string]string{"api_key": "k"}}
	check := func(r *Request) (decide.Call, decide.Call) {
		t.Helper()
		got := set.Match(r, now, nil)
		if len(got) != 2 || got[0].Rule.ID != "llm" || got[1].Rule.ID != "probed" {
			t.Fatalf("matched %+v", got)
		}
		return got[0].Call, got[1].Call
	}
	llm, probed := check(req)
	if llm.Cost != 1000 || llm.Reserve != 2*time.Minute || llm.Probe || llm.DebitDenied {
		t.Errorf("take of the rule's estimate: %+v", llm)
	}
	if !probed.Probe || probed.Reserve != 0 {
		t.Errorf("a rule without reserve still probes: %+v", probed)
	}
	own := *req
	own.Reserve = 250
	if llm, _ := check(&own); llm.Cost != 250 {
		t.Errorf("take of the check's own estimate: cost %d, want 250", llm.Cost)
	}

	hold := decide.NewHoldID()
	rep := *req
	rep.Cost = 1700
	for _, tc := range []struct {
		name, hold string
		status     int
		want       []string // rule:cost:settle
	}{
		{"settles with the cost", hold, 200, []string{"llm:1700:true", "probed:1700:false"}},
		{"a status that does not spend it settles at 0", hold, 500, []string{"llm:0:true", "probed:1700:false"}},
		{"no hold debits", "", 200, []string{"llm:1700:false", "probed:1700:false"}},
		{"no hold, a status it does not spend", "", 500, []string{"probed:1700:false"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, a := range set.MatchReportHold(&rep, tc.status, tc.hold, now, nil) {
				c := a.Call
				got = append(got, a.Rule.ID+":"+strconv.FormatInt(c.Cost, 10)+":"+strconv.FormatBool(c.Settle))
				if err := c.Validate(); err != nil {
					t.Errorf("%s: invalid call: %v", a.Rule.ID, err)
				}
				if a.Rule.ID == "llm" && (c.Reserve != 2*time.Minute || c.Counted() || c.Settle != (tc.hold != "") || (c.Settle && c.HoldID != hold)) {
					t.Errorf("llm: %+v", c)
				}
			}
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// A descriptor rule may reserve (it needs no spent_by: its cost after the
// response is the stream-done call's hits_addend), with what a reserving
// request rule needs besides, and not with what would refuse or hold its
// request-time calls otherwise.
func TestValidateDescriptorReserve(t *testing.T) {
	for _, tc := range []struct{ name, alg, extra, want string }{
		{"valid", "fixed_window", "reserve: 100", ""},
		{"valid bucket", "token_bucket", "reserve: 100", ""},
		{"sliding window", "sliding_window", "reserve: 100", "reserve: not with algorithm sliding_window"},
		{"concurrency", "concurrency", "reserve: 1", "reserve: not with algorithm concurrency"},
		{"debit admitted", "fixed_window", "reserve: 100\n    debit: admitted", "reserve: not with debit: admitted"},
		{"penalty", "fixed_window", "reserve: 100\n    penalty: 1m", "reserve: not with penalty"},
		{"escalate", "fixed_window", "reserve: 100\n    escalate: [{triggers: 2, within: 1m, penalty: 1m}]", "reserve: not with escalate"},
		{"lease", "fixed_window", "reserve: 100\n    lease: true", "reserve: not with lease"},
		{"above the quota", "fixed_window", "reserve: 1001", "reserve: 1001 is more than 1000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			limits := "[{requests: 1000, per: 1h}]"
			switch tc.alg {
			case "token_bucket":
				limits = "[{rate: 10, per: 1s, burst: 1000}]"
			case "concurrency":
				limits = "[{concurrent: 5}]"
			}
			_, err := Parse([]byte(`
rules:
  - id: r
    descriptor: {domain: llm, entries: [{key: api_key}]}
    algorithm: ` + tc.alg + `
    limits: ` + limits + `
    ` + tc.extra + "\n"))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("error %v, want none", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

// A settle is never replaced and replaces nothing, as a release; a
// descriptor's own limit does not share a reserving rule's state (its
// reservations keep theirs in the algorithm's hash, not in a counter).
func TestMatchDescriptorReserve(t *testing.T) {
	s := mustCompile(t, `
rules:
  - id: llm
    descriptor: {domain: llm, entries: [{key: api_key}], name: llm}
    algorithm: fixed_window
    limits: [{requests: 1000, per: 1h}]
    reserve: 100
  - id: llm-model
    descriptor: {domain: llm, entries: [{key: api_key}, {key: model}], replaces: [llm]}
    algorithm: fixed_window
    limits: [{requests: 10, per: 1h}]
  - id: plain
    descriptor: {domain: llm, entries: [{key: user}]}
    algorithm: fixed_window
    limits: [{requests: 1000, per: 1h}]
`)
	id := decide.NewHoldID()
	now := time.Now()
	req := &DescriptorRequest{Domain: "llm", Descriptors: []Descriptor{
		{Entries: []Entry{{"api_key", "k"}, {"hold", id}}, Cost: 7},
		{Entries: []Entry{{"api_key", "k"}, {"model", "m"}}, Cost: 1},
	}}
	as := s.MatchDescriptors(req, now, nil)
	if len(as) != 2 || as[0].Rule.ID != "llm" || !as[0].Call.Settle || as[0].Call.HoldID != id || as[0].Call.Cost != 7 {
		t.Fatalf("applied %+v, want the settle of llm kept beside llm-model", as)
	}
	bad := &DescriptorRequest{Domain: "llm", Descriptors: []Descriptor{{Entries: []Entry{{"api_key", "k"}, {"hold", "-"}}, Cost: 7}}}
	if as := s.MatchDescriptors(bad, now, nil); len(as) != 1 || !as[0].NoRelease || !as[0].Call.Settle {
		t.Errorf("a settle naming no id: %+v, want one that settles nothing (NoRelease)", as)
	}
	limit := &DescriptorLimit{Requests: 5, Per: time.Hour}
	for _, tc := range []struct {
		key   string
		share bool
	}{{"api_key", false}, {"user", true}} {
		d := Descriptor{Entries: []Entry{{tc.key, "k"}}, Cost: 1}
		own := s.MatchDescriptors(&DescriptorRequest{Domain: "llm", Descriptors: []Descriptor{d}}, now, nil)
		d.Limit = limit
		over := s.MatchDescriptors(&DescriptorRequest{Domain: "llm", Descriptors: []Descriptor{d}}, now, nil)
		if got := over[0].Call.Keys == own[0].Call.Keys; got != tc.share {
			t.Errorf("%s: an override shares the rule's keys: %v, want %v", tc.key, got, tc.share)
		}
	}
}
