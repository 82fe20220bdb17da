package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/kafkatest"
)

// ipv6RulesYAML limits /login to 3 an hour per client (an IPv6 client is
// its /64 by default) and /exact to 3 an hour per address (ipv6_prefix
// 128). Sliding windows, so no window boundary can fall inside the test.
const ipv6RulesYAML = `
rules:
  - id: login-per-ip
    match: {endpoints: ["/login"]}
    key: [ip]
    algorithm: sliding_window
    limits: [{requests: 3, per: 1h}]
  - id: exact-per-address
    match: {endpoints: ["/exact"]}
    key: [ip]
    algorithm: sliding_window
    limits: [{requests: 3, per: 1h}]
    ipv6_prefix: 128
`

// Two addresses of one IPv6 /64 share one limit, an address of another /64
// does not, IPv4 addresses stay apart, a rule with ipv6_prefix 128 keeps
// every address apart, and the events keep each client's full address.
func TestIPv6AddressesOfOnePrefixShareALimit(t *testing.T) {
	e := newEnv(t)
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(ipv6RulesYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	limiter := e.start("limiter", "RULES_FILE", path)
	const a, b, otherPrefix = "2001:db8:a:b::1", "2001:db8:a:b:ffff:ffff:ffff:fffe", "2001:db8:a:c::1"
	steps := []struct {
		ip, endpoint, reason string
	}{
		{a, "/login", event.ReasonOK},
		{a, "/login", event.ReasonOK},
		{a, "/login", event.ReasonOK},
		{b, "/login", event.ReasonRateLimited}, // same /64: A used the budget
		{otherPrefix, "/login", event.ReasonOK},
		{"203.0.113.1", "/login", event.ReasonOK},
		{"203.0.113.1", "/login", event.ReasonOK},
		{"203.0.113.1", "/login", event.ReasonOK},
		{"203.0.113.2", "/login", event.ReasonOK}, // IPv4 is never grouped
		{a, "/exact", event.ReasonOK},
		{a, "/exact", event.ReasonOK},
		{a, "/exact", event.ReasonOK},
		{a, "/exact", event.ReasonRateLimited},
		{b, "/exact", event.ReasonOK}, // ipv6_prefix 128: an address of its own
	}
	for i, s := range steps {
		if d := check(t, limiter, s.ip, s.endpoint); d.Reason != s.reason || d.Status != http.StatusOK {
			t.Fatalf("step %d, %s %s: %+v, want reason %s", i, s.ip, s.endpoint, d, s.reason)
		}
	}
	msgs := kafkatest.ReadMessages(t, e.broker.Brokers(), decisionsTopic, len(steps), 15*time.Second)
	seen := map[string]bool{}
	for _, m := range msgs {
		ev, err := event.DecodeDecision(m.Value)
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Key) != ev.IP {
			t.Errorf("event of %s keyed %q", ev.IP, m.Key)
		}
		seen[ev.IP] = true
	}
	for _, ip := range []string{a, b, otherPrefix} {
		if !seen[ip] {
			t.Errorf("no event with the full address %s among %v", ip, seen)
		}
	}
}

// A scan spread over the addresses of one IPv6 /64, 60 distinct endpoints
// from 60 addresses (none reaching the threshold of 50 alone), is banned:
// the ban message names the prefix, and afterwards a third address of the
// /64, never seen before, is denied as banned by the limiter (over
// /v1/check and /v1/auth), while an address of the next /64 and an IPv4
// client are not.
func TestIPv6ScanSpreadOverAPrefixIsBanned(t *testing.T) {
	e := newEnv(t)
	detector := e.start("detector")
	limiter := e.start("limiter", "TRUSTED_PROXIES", "127.0.0.1")
	const normal, unseen, nextPrefix, prefix = "198.51.100.10", "2001:db8:5ca:1:ffff:ffff:ffff:ff99", "2001:db8:5ca:2::1", "2001:db8:5ca:1::/64"
	check(t, limiter, normal, "/api/books/1")
	waitConsuming(t, detector, 1)

	for i := range 60 {
		ip := fmt.Sprintf("2001:db8:5ca:1:%x::%x", i, i+1)
		if d := check(t, limiter, ip, fmt.Sprintf("/api/scan/%d", i)); d.Status != http.StatusOK {
			t.Fatalf("scan request %d: %+v", i, d)
		}
	}
	testkit.WaitFor(t, 10*time.Second, "a new address of the scanned /64 to be denied as banned", func() bool {
		return check(t, limiter, unseen, "/api/x").Reason == event.ReasonBanned
	})
	for _, c := range []struct{ ip, reason string }{
		{unseen, event.ReasonBanned}, {nextPrefix, event.ReasonOK}, {normal, event.ReasonOK},
	} {
		if d := check(t, limiter, c.ip, "/api/books/2"); d.Reason != c.reason {
			t.Errorf("%s: %+v, want reason %s", c.ip, d, c.reason)
		}
	}
	for _, c := range []struct {
		ip     string
		status int
	}{{unseen, http.StatusForbidden}, {nextPrefix, http.StatusOK}} {
		req, _ := http.NewRequest(http.MethodGet, "http://"+limiter.addr+"/v1/auth", nil)
		req.Header.Set("X-Forwarded-Uri", "/api/y")
		req.Header.Set("X-Forwarded-For", c.ip)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("/v1/auth for %s: %d, want %d", c.ip, resp.StatusCode, c.status)
		}
	}

	b := bans(t, e, 1)[0]
	if b.Action != event.ActionBan || b.Scope != event.ScopeIP || b.Subject != prefix || b.Reason != "scan" ||
		b.Count < 50 || b.Threshold != 50 || b.Source != "detector" || len(b.Evidence.SampleEndpoints) == 0 {
		t.Fatalf("ban message: %+v, want a scan ban of %s", b, prefix)
	}
	if n := kafkatest.CountMessages(t, e.broker.Brokers(), bansTopic); n != 1 {
		t.Errorf("%d messages on the ban topic, want 1: the 60 addresses are one offender", n)
	}
}
