package client

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// A Decision prints its exported fields, with every verb, and never the
// limiter's headers the middleware keeps: they are bytes and offsets that
// mean nothing in a log line.
func TestDecisionFormat(t *testing.T) {
	d := Decision{Allowed: false, Reason: ReasonRateLimited, RuleID: "login-per-ip", Algorithm: "sliding_window",
		Limit: 5, Remaining: 0, Reset: 5 * time.Minute, RetryAfter: 5 * time.Minute, Mode: "redis", EventID: "e-1"}
	d.headers = rateLimitHeaders{all: `"login-per-ip/1s";r=0;t=300`, end: [len(limitHeaderNames)]uint16{4, 9}}
	tests := []struct{ format, want string }{
		{"%v", "{false rate_limited login-per-ip sliding_window 5 0 5m0s 5m0s redis false e-1 false}"},
		{"%+v", "{Allowed:false Reason:rate_limited RuleID:login-per-ip Algorithm:sliding_window Limit:5 Remaining:0 " +
			"Reset:5m0s RetryAfter:5m0s Mode:redis Shadow:false EventID:e-1 Fallback:false}"},
		{"%s", "{%!s(bool=false) rate_limited login-per-ip sliding_window %!s(int64=5) %!s(int64=0) 5m0s 5m0s redis %!s(bool=false) e-1 %!s(bool=false)}"},
		{"%#v", `client.Decision{Allowed:false, Reason:"rate_limited", RuleID:"login-per-ip", Algorithm:"sliding_window", ` +
			`Limit:5, Remaining:0, Reset:300000000000, RetryAfter:300000000000, Mode:"redis", Shadow:false, EventID:"e-1", Fallback:false}`},
	}
	for _, tt := range tests {
		if got := fmt.Sprintf(tt.format, d); got != tt.want {
			t.Errorf("%s:\n got %s\nwant %s", tt.format, got, tt.want)
		}
		if got := fmt.Sprintf(tt.format, &d); !strings.Contains(got, "login-per-ip") || strings.Contains(got, "headers") {
			t.Errorf("%s of a *Decision: %s", tt.format, got)
		}
	}
	if got := d.String(); got != tests[0].want {
		t.Errorf("String() = %s, want %s", got, tests[0].want)
	}
}

// decisionFields, which Decision prints as, has every exported field of
// Decision, in order: a field added to Decision must be printed too.
func TestDecisionFieldsMatch(t *testing.T) {
	var exported []reflect.StructField
	for f := range reflect.TypeFor[Decision]().Fields() {
		if f.IsExported() {
			exported = append(exported, f)
		}
	}
	view := reflect.TypeFor[decisionFields]()
	if view.NumField() != len(exported) {
		t.Fatalf("decisionFields has %d fields, Decision %d exported ones", view.NumField(), len(exported))
	}
	for i, f := range exported {
		if v := view.Field(i); v.Name != f.Name || v.Type != f.Type {
			t.Errorf("field %d: decisionFields has %s %s, Decision %s %s", i, v.Name, v.Type, f.Name, f.Type)
		}
	}
}
