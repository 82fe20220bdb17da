package client

import (
	"context"
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
		Limit: 5, Remaining: 0, Reset: 5 * time.Minute, RetryAfter: 5 * time.Minute, Mode: "redis", EventID: "e-1",
		Hold: "q1Vn2oXkT0aBw3-_9zYxLg"}
	d.headers = rateLimitHeaders{all: `"login-per-ip/1s";r=0;t=300`, end: [len(limitHeaderNames)]uint16{4, 9}}
	tests := []struct{ format, want string }{
		{"%v", "{false rate_limited login-per-ip sliding_window 5 0 5m0s 5m0s redis false e-1 false q1Vn2oXkT0aBw3-_9zYxLg}"},
		{"%+v", "{Allowed:false Reason:rate_limited RuleID:login-per-ip Algorithm:sliding_window Limit:5 Remaining:0 " +
			"Reset:5m0s RetryAfter:5m0s Mode:redis Shadow:false EventID:e-1 Fallback:false Hold:q1Vn2oXkT0aBw3-_9zYxLg}"},
		{"%s", "{%!s(bool=false) rate_limited login-per-ip sliding_window %!s(int64=5) %!s(int64=0) 5m0s 5m0s redis %!s(bool=false) e-1 %!s(bool=false) q1Vn2oXkT0aBw3-_9zYxLg}"},
		{"%#v", `client.Decision{Allowed:false, Reason:"rate_limited", RuleID:"login-per-ip", Algorithm:"sliding_window", ` +
			`Limit:5, Remaining:0, Reset:300000000000, RetryAfter:300000000000, Mode:"redis", Shadow:false, EventID:"e-1", Fallback:false, Hold:"q1Vn2oXkT0aBw3-_9zYxLg"}`},
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

// A Config or a Client printed, in a log line of the application, say,
// never shows the token: every verb prints "[redacted]" in its place.
func TestConfigAndClientHideTheToken(t *testing.T) {
	const secret = "s3cr3t-token-value"
	cfg := Config{URL: "http://127.0.0.1:1", Token: secret, Timeout: time.Second}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close(context.Background()) }()
	for _, format := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x"} {
		for _, v := range []any{cfg, &cfg, c} {
			got := fmt.Sprintf(format, v)
			if strings.Contains(got, secret) || strings.Contains(got, fmt.Sprintf("%x", secret)) {
				t.Errorf("%s of a %T shows the token: %s", format, v, got)
			}
			if format != "%x" && format != "%q" && !strings.Contains(got, "127.0.0.1") {
				t.Errorf("%s of a %T: %s, want its URL", format, v, got)
			}
		}
	}
	if got, want := fmt.Sprintf("%+v", cfg), "Token:[redacted]"; !strings.Contains(got, want) {
		t.Errorf("%%+v = %s, want %s in it", got, want)
	}
	if got := fmt.Sprintf("%+v", Config{URL: "u"}); !strings.Contains(got, "Token: ") {
		t.Errorf("%%+v of a Config without token = %s, want Token empty", got)
	}
}
