package decide

import (
	"testing"
	"time"
)

// A rule spent by reports: its checks are probes of cost 1, admitted while a
// unit is left, and they never spend one; reports debit even past the limit.
func TestProbe(t *testing.T) {
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow, SlidingWindowCounter, TokenBucket} {
		t.Run(string(alg), func(t *testing.T) {
			m := NewMemory()
			keys := Keys{State: "s", Hold: "h", Hits: "x"}
			limit := Limit{Requests: 5, Rate: 1, Burst: 5, Per: time.Minute}
			probe := Call{Keys: keys, Algorithm: alg, Limits: []Limit{limit}, Cost: 1, Probe: true}
			report := Call{Keys: keys, Algorithm: alg, Limits: []Limit{limit}, Cost: 1, DebitDenied: true}
			now := int64(60_000_000)
			for i := range 5 {
				if r := m.Decide(probe, now); !r.Allowed || r.Remaining != 5-int64(i) {
					t.Fatalf("probe after %d reports: %+v, want allowed with %d remaining", i, r, 5-i)
				}
				m.Decide(report, now)
			}
			for range 3 { // probes spend nothing, however many
				if r := m.Decide(probe, now); r.Allowed || r.Remaining != 0 || r.RetryAfter <= 0 {
					t.Fatalf("probe after 5 reports: %+v, want denied with a retry", r)
				}
			}
			report.Cost = 3 // a report past the limit still debits
			m.Decide(report, now)
			later := now + 10*limit.Per.Milliseconds() // every algorithm has freed the 8 units by then (the bucket refills 1 a minute)
			if r := m.Decide(probe, later); !r.Allowed {
				t.Fatalf("probe ten minutes later: %+v, want allowed", r)
			}
		})
	}
	bad := Call{Algorithm: FixedWindow, Limits: []Limit{{Requests: 1, Per: time.Second}}, Cost: 1, Probe: true, Penalty: time.Second}
	if bad.Validate() == nil {
		t.Fatal("a probe with a penalty is valid")
	}
}
