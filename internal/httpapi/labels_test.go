package httpapi_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// Whatever clients send — 1000 distinct tiers, user ids and endpoints, with
// and without a rule — the decision metrics keep the series they start with
// (rule ids, results and the tiers the rules name, "other" or "none"); never
// a user id, an endpoint or a client's tier.
func TestMetricLabelsStayBounded(t *testing.T) {
	s := newStack(t, stackOptions{rules: `
rules:
  - id: books
    match: {endpoints: ["/api/books/**"]}
    key: [user_id]
    algorithm: token_bucket
    limits: [{rate: 1, per: 1h, burst: 1000000}]
    tiers:
      VIP: [{rate: 1, per: 1h, burst: 1000000}]
`})
	atStart := s.seriesCount(t, "rate_limit_requests_total")
	if atStart == 0 {
		t.Fatal("rate_limit_requests_total has no series at start")
	}
	const n = 1000
	for i := range n {
		for _, body := range []string{
			fmt.Sprintf(`{"ip":"198.51.%d.%d","user_id":"user-%d","tier":"tier-%d","endpoint":"/nowhere/%d"}`, i/256, i%256, i, i, i),
			fmt.Sprintf(`{"ip":"198.51.%d.%d","user_id":"user-%d","tier":"tier-%d","endpoint":"/api/books/%d"}`, i/256, i%256, i, i, i),
		} {
			if r := s.check(body); r.Status != http.StatusOK {
				t.Fatalf("%s: status %d %s", body, r.Status, r.Error)
			}
		}
	}
	for _, tier := range []string{"", "vip", "VIP"} {
		if r := s.check(`{"ip":"198.51.100.1","user_id":"u","tier":"` + tier + `","endpoint":"/api/books/1"}`); r.Status != http.StatusOK {
			t.Fatalf("tier %q: status %d", tier, r.Status)
		}
	}

	families, err := s.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	allowedTiers := map[string]bool{"VIP": true, "other": true, "none": true}
	for _, f := range families {
		if f.GetName() == "rate_limit_requests_total" {
			if len(f.GetMetric()) != atStart {
				t.Errorf("rate_limit_requests_total has %d series after %d distinct subjects, want the %d it started with", len(f.GetMetric()), n, atStart)
			}
			if got := s.metric("rate_limit_requests_total", nil); got != 2*n+3 {
				t.Errorf("rate_limit_requests_total sums to %v, want %d", got, 2*n+3)
			}
		}
		if len(f.GetMetric()) > 50 {
			t.Errorf("%s has %d series: a label follows the traffic", f.GetName(), len(f.GetMetric()))
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				v := l.GetValue()
				if strings.Contains(v, "user-") || strings.Contains(v, "tier-") || strings.Contains(v, "/nowhere") ||
					strings.Contains(v, "/api/books/") || strings.HasPrefix(v, "198.51.") {
					t.Fatalf("%s{%s=%q}: a client-controlled value became a label", f.GetName(), l.GetName(), v)
				}
				if f.GetName() == "rate_limit_requests_total" && l.GetName() == "tier" && !allowedTiers[v] {
					t.Errorf("tier label %q, want one of VIP, other, none", v)
				}
			}
		}
	}
}

// seriesCount returns the number of series of the family name.
func (s *stack) seriesCount(t *testing.T, name string) int {
	t.Helper()
	families, err := s.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			return len(f.GetMetric())
		}
	}
	return 0
}
