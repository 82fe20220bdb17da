package limiter

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/rules"
)

// An exemption by user id or tier is the client's claim on a login route
// (the id typed in the form): it must never lift the ban of the address the
// request comes from, or a banned attacker escapes the ban by naming an
// exempt account. An exempt address or endpoint still skips everything,
// and a user or tier exemption still skips the rules.
func TestExemptIdentityKeepsTheAddressBan(t *testing.T) {
	clock := &fakeClock{now: time.Now()}
	bans := NewBanSet(prometheus.NewRegistry())
	bans.Apply(event.ActionBan, event.ScopeIP, "203.0.113.66", clock.now.Add(time.Hour))
	svc := New(Config{Instance: "test", Now: clock.Now, Bans: bans}, compileRules(t, heldRules+`
  endpoints: ["/healthz"]
`), OpaqueErrors(&modelDecider{mem: decide.NewMemory(), clock: clock}), &capturePublisher{}, zap.NewNop(), prometheus.NewRegistry())
	for _, tc := range []struct {
		name, ip, endpoint, user, tier string
		reason                         string
	}{
		{"banned address naming an exempt user", "203.0.113.66", "/login", "ops-bot", "", event.ReasonBanned},
		{"banned address naming an exempt user, another spelling", "203.0.113.66", "/login", "OPS-BOT", "", event.ReasonBanned},
		{"banned address with an exempt tier", "203.0.113.66", "/login", "erin", "STAFF", event.ReasonBanned},
		{"banned address on an exempt endpoint", "203.0.113.66", "/healthz", "", "", event.ReasonExempt},
		{"exempt user elsewhere", "198.51.100.1", "/login", "ops-bot", "", event.ReasonExempt},
		{"exempt tier elsewhere", "198.51.100.1", "/login", "erin", "staff", event.ReasonExempt},
		{"exempt address", "10.1.2.3", "/login", "", "", event.ReasonExempt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := rules.Request{IP: tc.ip, Endpoint: tc.endpoint, Method: "POST", UserID: tc.user, Tier: tc.tier, Cost: 1}
			var d Decision
			svc.Check(context.Background(), &req, &d)
			if d.Reason != tc.reason || d.Allowed != (tc.reason != event.ReasonBanned) {
				t.Errorf("allowed %v, reason %q; want reason %q", d.Allowed, d.Reason, tc.reason)
			}
		})
	}
}
