package archiver

import (
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/event"
)

func TestViolationFrom(t *testing.T) {
	ts := time.Date(2026, 11, 21, 10, 30, 0, 123456000, time.UTC)
	d := event.Decision{EventID: "6ba7b810-9dad-11d1-80b4-00c04fd430c8", TS: ts, Instance: "limiter-1", UserID: "u-42",
		IP: "203.0.113.7", Endpoint: "/api/books/17", Method: "GET", Tier: "BASIC", RuleID: "login-per-ip",
		Algorithm: "sliding_window", Reason: event.ReasonRateLimited, Limit: 5, Remaining: 2, RetryAfterMS: 740, Shadow: true}
	want := Violation{EventID: d.EventID, OccurredAt: ts, UserID: "u-42", IP: "203.0.113.7", Endpoint: "/api/books/17",
		Method: "GET", Tier: "BASIC", RuleID: "login-per-ip", Algorithm: "sliding_window", Reason: event.ReasonRateLimited,
		Limit: 5, CurrentCount: 3, RetryAfterMs: 740, Shadow: true, Instance: "limiter-1"}
	if got := ViolationFrom(d); got != want {
		t.Errorf("ViolationFrom =\n%+v\nwant\n%+v", got, want)
	}
	d.Limit, d.Remaining = 0, 3 // a banned client: no rule limit
	if got := ViolationFrom(d).CurrentCount; got != 0 {
		t.Errorf("CurrentCount = %d with remaining above limit, want 0", got)
	}
	d.Domain = "edge"
	d.Descriptors = []event.Descriptor{{Entries: []event.Entry{{Key: "remote_address", Value: "203.0.113.7"}}, RuleID: "r", Code: event.CodeOverLimit}}
	got := ViolationFrom(d)
	if want := `[{"entries":[{"key":"remote_address","value":"203.0.113.7"}],"rule_id":"r","code":"OVER_LIMIT"}]`; got.Domain != "edge" || got.Descriptors != want {
		t.Errorf("rate limit API decision: domain %q, descriptors %s; want edge, %s", got.Domain, got.Descriptors, want)
	}
}
