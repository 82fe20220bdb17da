package httpapi_test

import (
	"net/http"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/redisstore"
	"github.com/ratewarden/ratewarden/internal/testkit"
)

// A Redis that does not answer: each rule follows its on_redis_failure
// policy — local limiting in memory, allow, or deny with 503 — and after
// five failed round trips the breaker opens: the mode is local and Redis is
// no longer called.
func TestRedisFailurePolicies(t *testing.T) {
	testkit.AvoidHourEnd(t) // the local limit counts in memory, in the hour's window
	s := deadRedisStack(t)
	var local []response
	for range 3 {
		local = append(local, s.check(`{"ip":"192.0.2.7","endpoint":"/local"}`))
	}
	if !local[0].Allowed || !local[1].Allowed || local[2].Allowed || local[2].Mode != "local" || local[2].Reason != "rate_limited" {
		t.Fatalf("local policy must limit in memory: %+v", local)
	}
	for range 3 {
		if r := s.check(`{"ip":"192.0.2.7","endpoint":"/allow"}`); r.Status != 200 || !r.Allowed || r.Mode != "local" {
			t.Fatalf("allow policy: %+v", r)
		}
	}
	// The 503 says, in fields a client reads, that it is the rule's own
	// refusal and not a limiter down (or a proxy's 503).
	if r := s.check(`{"ip":"192.0.2.7","endpoint":"/deny"}`); r.Status != 503 || r.Error != denyRuleError ||
		r.RuleID != "deny-rule" || r.OnRedisFailure != "deny" {
		t.Fatalf("deny policy must answer 503 naming the rule and its policy: %+v", r)
	}
	if r := s.do(http.MethodGet, "/v1/auth", "", map[string]string{"X-Forwarded-Uri": "/deny"}); r.Status != 503 ||
		r.Error != denyRuleError || r.RuleID != "deny-rule" || r.OnRedisFailure != "deny" {
		t.Fatalf("forward auth, deny policy: %+v", r)
	}
	// The node's breaker opens after the coalescer's 3 failed round trips;
	// the next fails at once, and the mode goes local: no more round trips.
	if got := s.metric("rate_limit_redis_errors_total", nil); got != 4 {
		t.Fatalf("redis errors counted = %v, want 4: 3 failed round trips open the breaker, the 4th fails at once", got)
	}
	if got := s.metric("rate_limit_mode", map[string]string{"mode": "local"}); got != 1 {
		t.Fatalf("rate_limit_mode{mode=local} = %v, want 1", got)
	}
}

// denyRuleError is the error of deadRedisStack's deny-rule, not decided.
const denyRuleError = "rule deny-rule cannot be decided: redis unavailable and its failure policy is deny"

// deadRedisStack is a stack whose Redis never answers, with one rule per
// failure policy: /local (2 an hour, in memory, its window aligned on the
// hour as Redis's are), /allow and /deny.
func deadRedisStack(t *testing.T) *stack {
	t.Helper()
	redisstore.RouteLogs(zap.NewNop())
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { _ = dead.Close() })
	return newStack(t, stackOptions{rdb: dead, prefix: "rwtest:dead:", rules: `
rules:
  - id: local-rule
    match: {endpoints: ["/local"]}
    key: [ip]
    algorithm: fixed_window
    limits: [{requests: 2, per: 1h}]
    on_redis_failure: local
  - id: allow-rule
    match: {endpoints: ["/allow"]}
    key: [ip]
    algorithm: fixed_window
    limits: [{requests: 1, per: 1m}]
    on_redis_failure: allow
  - id: deny-rule
    match: {endpoints: ["/deny"]}
    key: [ip]
    algorithm: fixed_window
    limits: [{requests: 1, per: 1m}]
    on_redis_failure: deny
`})
}
