package httpapi_test

import (
	"os"
	"testing"
)

// The denial that starts a penalty says how long the penalty lasts, in the
// body and in every header, as the denials under it do: a client told the
// window's reset (under a second) would come back at once and be refused
// for the rest of the penalty. The rule is the example rules file's
// login-per-ip (5 a second, 100 a minute, penalty 5m), and the first
// denial is whichever request comes first past a limit (the 6th in a
// second on a fast machine; at the latest the 101st), so the test does
// not depend on how fast the requests go.
func TestFirstDenialReportsPenalty(t *testing.T) {
	example, err := os.ReadFile("../../deploy/rules.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := newStack(t, stackOptions{rules: string(example)})
	body := `{"ip":"203.0.113.9","endpoint":"/api/login","method":"POST"}`
	const penaltyMs = 300_000
	var first response
	for i := 1; ; i++ {
		if i > 101 {
			t.Fatal("101 logins in a row admitted; want a denial by the 100-a-minute limit at the latest")
		}
		if first = s.check(body); !first.Allowed {
			break
		}
	}
	// The penalty starts at the time Redis decides the denial, the time
	// its answer counts from: exactly the rule's penalty.
	if first.Reason != "rate_limited" || first.RuleID != "login-per-ip" ||
		first.ResetAfterMs != penaltyMs || first.RetryAfterMs != penaltyMs {
		t.Fatalf("first denial: %+v; want rate_limited by login-per-ip, reset and retry after %d ms", first, penaltyMs)
	}
	// Denied by the 1s limit, or by the 1m one on a slow machine.
	binding := "1s"
	if first.Limit == 100 {
		binding = "1m"
	}
	for name, want := range map[string]string{
		"Retry-After":       "300",
		"X-RateLimit-Reset": "300",
		"RateLimit":         `"login-per-ip/` + binding + `";r=0;t=300`,
	} {
		if got := first.Header.Get(name); got != want {
			t.Errorf("first denial: %s = %q, want %q", name, got, want)
		}
	}

	// The denial after it, held by the penalty, tells the same story.
	next := s.check(body)
	if next.Allowed {
		t.Fatal("the request after the first denial was admitted under a 5m penalty")
	}
	if next.ResetAfterMs > penaltyMs || next.ResetAfterMs <= 60_000 || next.RetryAfterMs != next.ResetAfterMs {
		t.Errorf("next denial: reset %d ms, retry %d ms; want the penalty's time left (at most %d ms, more than any window)",
			next.ResetAfterMs, next.RetryAfterMs, penaltyMs)
	}
}
