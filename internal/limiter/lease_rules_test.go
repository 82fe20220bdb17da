package limiter_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/limiter"
	"github.com/ratewarden/ratewarden/internal/rules"
	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// overRule is a rule that denies its key's second request of the hour:
// the over-limit cache answers the third.
const overRule = `
  - id: over
    match: {endpoints: ["/over"]}
    key: [endpoint]
    algorithm: fixed_window
    limits: [{requests: 1, per: 1h}]
`

// TestRulesChangeKeepsLeases: a rule set compiled again from the same
// rules (a reload, an admin change or an xDS response that changed other
// rules) keeps the leases and the cached denials of the rules it did not
// change: the next request of a leased key is answered from its lease, the
// next of a denied key from the cache, and no unit goes back. A changed
// limit gives its rule's lease back, and its cached denials are forgotten.
func TestRulesChangeKeepsLeases(t *testing.T) {
	testkit.AvoidHourEnd(t) // /over is denied, from Redis then the cache, until the hour ends
	text := leasedRules + overRule
	svc, reg := leasedService(t, redistest.StartServer(t), 0, text)
	check := func(endpoint string) bool {
		req := rules.Request{IP: "10.3.0.1", Endpoint: endpoint, Method: "GET", Cost: 1}
		var d limiter.Decision
		svc.Check(context.Background(), &req, &d)
		return d.Allowed
	}
	metric := func(name string) float64 { return testkit.MetricSum(t, reg, name, nil) }
	for i := 0; metric("rate_limit_lease_decisions_total") == 0; i++ {
		if i == 1000 {
			t.Fatal("1000 requests of a hot key, none answered from a lease")
		}
		check("/fixed")
	}
	for range 50 { // the lease grows with the key's traffic
		check("/fixed")
	}
	for i, want := range []bool{true, false, false} { // the third from the cache
		if check("/over") != want {
			t.Fatalf("/over request %d: allowed %v, limit 1", i+1, !want)
		}
	}
	held, decisions := metric("rate_limit_lease_units"), metric("rate_limit_lease_decisions_total")
	hits, returned := metric("rate_limit_over_limit_cache_hits_total"), metric("rate_limit_lease_units_returned_total")
	if held == 0 || hits == 0 {
		t.Fatalf("before the change: %v units held, %v cache hits; the test needs both", held, hits)
	}

	svc.SetRules(ruleSet(t, text, "rwlease:"))
	if got := metric("rate_limit_lease_units"); got != held {
		t.Fatalf("the same rules compiled again: units held went from %v to %v", held, got)
	}
	if !check("/fixed") || metric("rate_limit_lease_decisions_total") != decisions+1 {
		t.Fatal("the same rules compiled again: the next request was not answered from the lease")
	}
	if check("/over") || metric("rate_limit_over_limit_cache_hits_total") != hits+1 {
		t.Fatal("the same rules compiled again: the next request of a denied key was not answered from the cache")
	}

	changed := strings.Replace(text, "limits: [{requests: 600, per: 1h}]\n    lease: {max_units: 20}\n  - id: counter",
		"limits: [{requests: 700, per: 1h}]\n    lease: {max_units: 20}\n  - id: counter", 1)
	changed = strings.Replace(changed, "limits: [{requests: 1, per: 1h}]", "limits: [{requests: 5, per: 1h}]", 1)
	if changed == text {
		t.Fatal("the change changed nothing")
	}
	svc.SetRules(ruleSet(t, changed, "rwlease:"))
	if got := metric("rate_limit_lease_units"); got != 0 {
		t.Fatalf("a changed limit: %v units still held", got)
	}
	if !check("/over") {
		t.Fatal("a raised limit: the key's next request was denied")
	}
	deadline := time.Now().Add(10 * time.Second) // the renewer gives back: generous, not a timing
	for metric("rate_limit_lease_units_returned_total") == returned {
		if time.Now().After(deadline) {
			t.Fatal("a changed limit: its lease was not given back")
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("units held %v; returned after the change %v", held, metric("rate_limit_lease_units_returned_total")-returned)
}
