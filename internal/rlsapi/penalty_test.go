package rlsapi_test

import (
	"encoding/json"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratewarden/ratewarden/internal/rlsapi"
	"github.com/ratewarden/ratewarden/internal/rules"
	"github.com/ratewarden/ratewarden/internal/testkit"
)

// The call that starts a penalty answers with the penalty's time until
// reset, on gRPC (status and RateLimit-Reset header) and on POST /json, as
// the calls under it do: an Envoy told the window's reset would let the
// client come back before the penalty ends. A descriptor rule of 5 calls
// a minute with a 5m penalty, longer than any reset of the window: the
// 6th call is the first denied (the calls keep away from the end of a
// minute).
func TestFirstDenialReportsPenalty(t *testing.T) {
	testkit.AvoidWindowEnd(t, time.Minute, 15*time.Second)
	r := rule("login", "edge", 5, time.Minute, "generic_key", "login", "remote_address", "")
	r.Penalty = rules.Duration(5 * time.Minute)
	e := newEnv(t, []rules.Rule{r}, options{cfg: rlsapi.Config{ResponseHeaders: true}})
	const penalty = 5 * time.Minute

	grpcCall := func() (rlsv3.RateLimitResponse_Code, time.Duration, string) {
		resp := e.mustCall(request("edge", desc("generic_key", "login", "remote_address", "198.51.100.1")))
		reset := ""
		for _, h := range resp.ResponseHeadersToAdd {
			if h.Key == "RateLimit-Reset" {
				reset = h.Value
			}
		}
		return resp.OverallCode, resp.Statuses[0].DurationUntilReset.AsDuration(), reset
	}
	for i := range 5 {
		if code, _, _ := grpcCall(); code != ok {
			t.Fatalf("gRPC call %d: %v, want OK", i+1, code)
		}
	}
	// The penalty starts when Redis decides the denial, the time its
	// answer counts from: exactly the rule's penalty.
	if code, reset, header := grpcCall(); code != rlsv3.RateLimitResponse_OVER_LIMIT || reset != penalty || header != "300" {
		t.Errorf("gRPC, the 6th call: %v, duration_until_reset %s, RateLimit-Reset %q; want OVER_LIMIT, %s, 300",
			code, reset, header, penalty)
	}

	body := `{"domain":"edge","descriptors":[{"entries":[{"key":"generic_key","value":"login"},{"key":"remote_address","value":"198.51.100.2"}]}]}`
	for i := range 5 {
		if status, b := e.postJSON(body); status != 200 {
			t.Fatalf("/json call %d: %d %s, want 200", i+1, status, b)
		}
	}
	status, b := e.postJSON(body)
	var answer struct {
		Statuses []struct {
			Code               string `json:"code"`
			DurationUntilReset string `json:"durationUntilReset"`
		} `json:"statuses"`
	}
	if err := json.Unmarshal([]byte(b), &answer); err != nil {
		t.Fatalf("/json answer %s: %v", b, err)
	}
	if status != 429 || len(answer.Statuses) != 1 || answer.Statuses[0].Code != "OVER_LIMIT" ||
		answer.Statuses[0].DurationUntilReset != "300s" {
		t.Errorf("/json, the 6th call: %d %s; want 429, OVER_LIMIT, durationUntilReset 300s", status, b)
	}
}
