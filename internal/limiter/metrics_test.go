package limiter

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

const seriesRules = `
rules:
  - id: open
    match: {endpoints: ["/api/**"]}
    key: [ip]
    algorithm: token_bucket
    limits: [{rate: 1, per: 1s, burst: 5}]
    on_redis_failure: local
  - id: vip-only
    match: {endpoints: ["/api/**"], tiers: [vip]}
    key: [ip]
    algorithm: sliding_window
    limits: [{requests: 5, per: 1s}]
    on_redis_failure: deny
exempt:
  tiers: [SUPER_ADMIN]
`

// TestSeriesStartAtZero checks that the labelled families have their known
// series as soon as the service is built (the counters at 0, which a fresh
// registry guarantees), and that a new rule set adds the series of its
// rules.
func TestSeriesStartAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	NewBanSet(reg)
	svc := New(Config{
		ClassifyError: func(error) string { return "timeout" },
		ErrorClasses:  []string{"timeout", "connection"},
	}, compileRules(t, seriesRules), &fakeDecider{}, nopPublisher{}, zap.NewNop(), reg)

	var want []string
	for _, tier := range []string{"none", "other", "SUPER_ADMIN", "VIP"} {
		for _, result := range []string{"exempt", "banned", "no_rule"} {
			want = append(want, "result="+result+",rule=,shadow=false,tier="+tier)
		}
		want = append(want,
			"result=ok,rule=open,shadow=false,tier="+tier,
			"result=rate_limited,rule=open,shadow=false,tier="+tier,
			"result=rate_limited,rule=open,shadow=true,tier="+tier)
	}
	want = append(want, // the tier its match admits; unavailable: its policy is deny
		"result=ok,rule=vip-only,shadow=false,tier=VIP",
		"result=rate_limited,rule=vip-only,shadow=false,tier=VIP",
		"result=rate_limited,rule=vip-only,shadow=true,tier=VIP",
		"result=unavailable,rule=vip-only,shadow=false,tier=VIP")
	tests := []struct {
		family string
		want   []string
	}{
		{"rate_limit_requests_total", want},
		{"rate_limit_check_duration_seconds", []string{"algorithm=none", "algorithm=sliding_window", "algorithm=token_bucket"}},
		{"rate_limit_redis_errors_total", []string{"class=connection", "class=timeout"}},
		{"rate_limit_redis_health_check_failures_total", []string{"class=connection", "class=timeout"}},
		{"rate_limit_blacklist_size", []string{"scope=ip", "scope=user"}},
		{"rate_limit_mode", []string{"mode=local", "mode=permissive", "mode=redis"}},
	}
	got := seriesOf(t, reg)
	for _, tt := range tests {
		t.Run(tt.family, func(t *testing.T) {
			slices.Sort(tt.want)
			if !slices.Equal(got[tt.family], tt.want) {
				t.Errorf("series at start:\n got %q\nwant %q", got[tt.family], tt.want)
			}
		})
	}

	t.Run("new rule set", func(t *testing.T) {
		svc.SetRules(compileRules(t, strings.ReplaceAll(seriesRules, "id: open", "id: reopened")))
		got := seriesOf(t, reg)["rate_limit_requests_total"]
		if !slices.Contains(got, "result=ok,rule=reopened,shadow=false,tier=VIP") {
			t.Error("no series of the new rule after the reload: its series start at 0")
		}
		if slices.Contains(got, "result=ok,rule=open,shadow=false,tier=VIP") {
			t.Error("the removed rule's series stayed after the reload")
		}
	})

	// A config source that renames its rules on every change (an xDS
	// management server publishing new ids) must not grow the series.
	t.Run("churn of rule ids", func(t *testing.T) {
		before := len(seriesOf(t, reg)["rate_limit_requests_total"])
		for i := range 50 {
			svc.SetRules(compileRules(t, strings.ReplaceAll(seriesRules, "id: open", fmt.Sprintf("id: churn-%d", i))))
		}
		if got := len(seriesOf(t, reg)["rate_limit_requests_total"]); got != before {
			t.Errorf("%d series after 50 renames, %d before", got, before)
		}
	})
}

// seriesOf returns, by family, the label sets of the series of reg as
// sorted "name=value,..." strings.
func seriesOf(t *testing.T, reg *prometheus.Registry) map[string][]string {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			out[f.GetName()] = append(out[f.GetName()], strings.Join(labels, ","))
		}
		slices.Sort(out[f.GetName()])
	}
	return out
}
