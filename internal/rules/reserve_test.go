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
