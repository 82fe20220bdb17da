package httpapi_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/testkit/kafkatest"
)

// Every decision becomes one message with every contract field, keyed by
// the client IP, read back by an independent consumer.
func TestEveryDecisionIsPublished(t *testing.T) {
	s := newStack(t, stackOptions{rules: ruleFor("sliding_window", "[{requests: 3, per: 1m}]")})
	const n = 40
	ids := map[string]response{}
	for i := range n {
		body := `{"ip":"203.0.113.7","endpoint":"/api/books/1","user_id":"u-42","tier":"BASIC","method":"post"}`
		if i%2 == 1 {
			body = `{"ip":"2001:db8::1","endpoint":"/elsewhere"}`
		}
		r := s.check(body)
		ids[r.EventID] = r
	}
	msgs := kafkatest.ReadMessages(t, s.opts.broker.Brokers(), topic, n, 20*time.Second)
	contractFields := []string{"event_id", "ts", "instance", "user_id", "ip", "endpoint", "method", "tier", "rule_id",
		"algorithm", "allowed", "reason", "limit", "remaining", "retry_after_ms", "mode", "shadow"}
	seen := map[string]bool{}
	for _, m := range msgs {
		var fields map[string]any
		if err := json.Unmarshal(m.Value, &fields); err != nil {
			t.Fatalf("undecodable event %q: %v", m.Value, err)
		}
		for _, f := range contractFields {
			if _, ok := fields[f]; !ok {
				t.Errorf("event lacks %q: %s", f, m.Value)
			}
		}
		ev, err := event.DecodeDecision(m.Value)
		if err != nil {
			t.Fatalf("decode %s: %v", m.Value, err)
		}
		if string(m.Key) != ev.IP {
			t.Errorf("message key %q, want the client ip %q", m.Key, ev.IP)
		}
		resp, ok := ids[ev.EventID]
		if !ok || seen[ev.EventID] {
			t.Fatalf("event %s unknown or duplicated", ev.EventID)
		}
		seen[ev.EventID] = true
		if ev.Allowed != resp.Allowed || ev.Reason != resp.Reason || ev.RuleID != resp.RuleID || ev.Remaining != resp.Remaining ||
			ev.Instance != "test" || ev.Mode != "redis" || time.Since(ev.TS) > time.Minute {
			t.Errorf("event %+v does not match response %+v", ev, resp)
		}
		if ev.IP == "203.0.113.7" && (ev.UserID != "u-42" || ev.Tier != "BASIC" || ev.Method != "POST" || ev.Endpoint != "/api/books/1" || ev.Algorithm != "sliding_window") {
			t.Errorf("event fields: %+v", ev)
		}
	}
	if len(seen) != n {
		t.Fatalf("%d distinct events, want %d", len(seen), n)
	}
}

// Requests at every bound the API accepts make events the detector and the
// archiver accept: the longest endpoint (which normalization lengthens by
// its leading '/'), percent-encoded bytes that are not UTF-8, and the
// longest user, tier and method.
func TestRequestsAtTheBoundsMakeValidEvents(t *testing.T) {
	s := newStack(t, stackOptions{rules: ruleFor("token_bucket", "[{rate: 1000, per: 1s, burst: 1000}]")})
	bodies := []map[string]string{
		{"ip": "203.0.113.7", "endpoint": strings.Repeat("a", event.MaxEndpoint)},
		{"ip": "203.0.113.7", "endpoint": "/" + strings.Repeat("%FF", (event.MaxEndpoint-1)/3)},
		{"ip": "::ffff:203.0.113.7", "endpoint": "/api/x", "user_id": strings.Repeat("é", event.MaxUserID/2),
			"tier": strings.Repeat("t", event.MaxTier), "method": strings.Repeat("m", event.MaxMethod)},
	}
	for _, b := range bodies {
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		if r := s.check(string(raw)); r.Status != 200 {
			t.Fatalf("%.80s...: status %d, want 200", raw, r.Status)
		}
	}
	for _, m := range kafkatest.ReadMessages(t, s.opts.broker.Brokers(), topic, len(bodies), 20*time.Second) {
		if _, err := event.DecodeDecision(m.Value); err != nil {
			t.Errorf("the event of an accepted request is refused: %v", err)
		}
	}
}

// With the broker gone, decisions go on and the events that cannot be queued
// are dropped and counted.
func TestBrokerDownDecisionsContinue(t *testing.T) {
	s := newStack(t, stackOptions{rules: ruleFor("token_bucket", "[{rate: 1000, per: 1s, burst: 1000}]"), queueSize: 20})
	s.opts.broker.Stop()
	start := time.Now()
	for i := range 300 {
		r := s.check(`{"ip":"203.0.113.8","endpoint":"/api/x"}`)
		if r.Status != 200 || r.Reason == "" {
			t.Fatalf("check %d with the broker down: %+v", i, r)
		}
	}
	t.Logf("300 checks with the broker down took %v", time.Since(start))
	if dropped := s.metric("rate_limit_events_dropped_total", nil); dropped < 250 {
		t.Fatalf("dropped events = %v, want at least 250 of 300 with a queue of 20", dropped)
	}
}
