package limiter

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/rules"
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

// timeoutErrors reads every error as a timeout, of two classes: the
// series of both start at 0.
type timeoutErrors struct{ Backend }

func (timeoutErrors) ErrorClass(error) string { return "timeout" }
func (timeoutErrors) ErrorClasses() []string  { return []string{"timeout", "connection"} }

// TestSeriesStartAtZero checks that the labelled families have their known
// series as soon as the service is built (the counters at 0, which a fresh
// registry guarantees), and that a new rule set adds the series of its
// rules.
func TestSeriesStartAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	NewBanSet(reg)
	svc := New(Config{}, compileRules(t, seriesRules), timeoutErrors{OpaqueErrors(&fakeDecider{})}, nopPublisher{}, zap.NewNop(), reg)

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

	// A request still deciding under the rules before a change makes the
	// series of a removed rule again: it goes at the next change, whatever
	// its tier and count; the series of the rules kept stay with theirs.
	t.Run("series made again after the change", func(t *testing.T) {
		svc.metrics.observe(&Decision{Reason: "rate_limited", RuleID: "churn-48"}, "weird", 0)
		svc.metrics.observe(&Decision{Reason: "ok", RuleID: "vip-only"}, "VIP", 0)
		svc.SetRules(compileRules(t, seriesRules))
		got := seriesOf(t, reg)["rate_limit_requests_total"]
		for _, s := range got {
			if strings.Contains(s, "rule=churn-") {
				t.Errorf("series %s of a removed rule stayed", s)
			}
		}
		if n := testutil.ToFloat64(svc.metrics.requests.WithLabelValues("ok", "vip-only", "VIP", "false")); n != 1 {
			t.Errorf("the kept rule's series counts %v, want 1", n)
		}
	})

	// observe keeps the series it used last (a hot key's decisions all
	// count in one): a rule removed and then restored must count in the
	// series made again, not in the one deleted with the rule.
	t.Run("rule removed and restored", func(t *testing.T) {
		ok := &Decision{Reason: "ok", RuleID: "open"}
		svc.metrics.observe(ok, "VIP", 0)
		svc.SetRules(compileRules(t, strings.ReplaceAll(seriesRules, "id: open", "id: closed")))
		svc.SetRules(compileRules(t, seriesRules))
		svc.metrics.observe(ok, "VIP", 0)
		if n := testutil.ToFloat64(svc.metrics.requests.WithLabelValues("ok", "open", "VIP", "false")); n != 1 {
			t.Errorf("the restored rule's series counts %v, want 1", n)
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

// renamedRules is n descriptor rules whose ids start with prefix: the
// rules an xDS config makes, renamed when its domain changes.
func renamedRules(tb testing.TB, n int, prefix string) *rules.Set {
	tb.Helper()
	f := &rules.File{Rules: make([]rules.Rule, n)}
	for i := range f.Rules {
		f.Rules[i] = rules.Rule{ID: fmt.Sprintf("%s.%d", prefix, i), Priority: 100, Algorithm: decide.FixedWindow,
			OnRedisFailure: rules.FailLocal, Limits: []rules.Limit{{Requests: 5, Per: rules.Duration(time.Hour)}},
			Descriptor: &rules.DescriptorMatch{Domain: prefix, Entries: []rules.DescriptorEntry{{Key: "k", Value: fmt.Sprint(i)}}}}
	}
	set, err := rules.Compile(f, rules.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	return set
}

// Every rule renamed at each change (an xDS config whose domain changes):
// the decision series of the n rules removed are deleted, in time linear in
// the series (one scan of every series per removed rule would take 2 s for
// 2 000 rules, minutes for 20 000).
func BenchmarkRenameRules(b *testing.B) {
	for _, n := range []int{2000, 20000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			sets := [2]*rules.Set{renamedRules(b, n, "a"), renamedRules(b, n, "b")}
			svc := New(Config{}, sets[0], OpaqueErrors(&fakeDecider{}), nopPublisher{}, zap.NewNop(), prometheus.NewRegistry())
			i := 1
			for b.Loop() {
				svc.SetRules(sets[i%2])
				i++
			}
		})
	}
}
