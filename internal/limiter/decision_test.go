package limiter

import (
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/rules"
)

func TestAggregate(t *testing.T) {
	enforced := func(id string) *rules.Rule { return &rules.Rule{ID: id, Algorithm: decide.SlidingWindow} }
	shadow := func(id string) *rules.Rule { return &rules.Rule{ID: id, Algorithm: decide.FixedWindow, Shadow: true} }
	allow := func(remaining int64) decide.Result {
		return decide.Result{Allowed: true, Limit: 10, Remaining: remaining, ResetAfter: time.Second}
	}
	deny := func(retry time.Duration) decide.Result {
		return decide.Result{Limit: 10, RetryAfter: retry, ResetAfter: retry}
	}
	tests := []struct {
		name         string
		rules        []*rules.Rule
		results      []decide.Result
		allowed      bool
		reason       string
		shadow       bool
		report       string
		headers      string // rule the headers describe; "" for none
		retry        time.Duration
		remainingOut int64
	}{
		{"one rule allows", []*rules.Rule{enforced("a")}, []decide.Result{allow(3)}, true, event.ReasonOK, false, "a", "a", 0, 3},
		{"fewest remaining reported", []*rules.Rule{enforced("a"), enforced("b")}, []decide.Result{allow(5), allow(2)}, true, event.ReasonOK, false, "b", "b", 0, 2},
		{"tie keeps priority order", []*rules.Rule{enforced("a"), enforced("b")}, []decide.Result{allow(2), allow(2)}, true, event.ReasonOK, false, "a", "a", 0, 2},
		{"any enforced denial denies", []*rules.Rule{enforced("a"), enforced("b")}, []decide.Result{allow(5), deny(time.Second)}, false, event.ReasonRateLimited, false, "b", "b", time.Second, 0},
		{"longest retry reported", []*rules.Rule{enforced("a"), enforced("b")}, []decide.Result{deny(time.Second), deny(time.Minute)}, false, event.ReasonRateLimited, false, "b", "b", time.Minute, 0},
		{"shadow denial reported, not enforced", []*rules.Rule{enforced("a"), shadow("s")}, []decide.Result{allow(5), deny(time.Minute)}, true, event.ReasonRateLimited, true, "s", "a", 0, 0},
		{"enforced denial beats shadow denial", []*rules.Rule{shadow("s"), enforced("a")}, []decide.Result{deny(time.Hour), deny(time.Second)}, false, event.ReasonRateLimited, false, "a", "a", time.Second, 0},
		{"only shadow rules: no headers", []*rules.Rule{shadow("s")}, []decide.Result{allow(1)}, true, event.ReasonOK, false, "s", "", 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var d Decision
			d.Reset()
			for i, r := range tt.rules {
				d.Applied = append(d.Applied, rules.Applied{Rule: r})
				d.Results = append(d.Results, tt.results[i])
			}
			d.aggregate()
			if d.Allowed != tt.allowed || d.Reason != tt.reason || d.Shadow != tt.shadow || d.RuleID != tt.report ||
				d.RetryAfter != tt.retry || d.Remaining != tt.remainingOut {
				t.Fatalf("got allowed=%v reason=%s shadow=%v rule=%s retry=%v remaining=%d", d.Allowed, d.Reason, d.Shadow, d.RuleID, d.RetryAfter, d.Remaining)
			}
			a, _, ok := d.EnforcedLimit()
			if (tt.headers == "") == ok || (ok && a.Rule.ID != tt.headers) {
				t.Fatalf("headers describe %v (ok=%v), want %q", a.Rule, ok, tt.headers)
			}
		})
	}
}
