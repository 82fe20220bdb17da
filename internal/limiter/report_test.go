package limiter

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/rules"
)

// heldRules price failed logins per address, per account, and per address
// and account.
const heldRules = `
rules:
  - id: per-ip
    match: {endpoints: ["/login"]}
    key: [ip]
    algorithm: fixed_window
    limits: [{requests: 100, per: 1h}]
    spent_by: report
    statuses: [401]
  - id: per-user
    match: {endpoints: ["/login"]}
    key: [user_id]
    algorithm: fixed_window
    limits: [{requests: 100, per: 1h}]
    spent_by: report
    statuses: [401]
  - id: per-ip-user
    match: {endpoints: ["/login"]}
    key: [ip, user_id]
    algorithm: fixed_window
    limits: [{requests: 100, per: 1h}]
    spent_by: report
    statuses: [401]
exempt:
  users: [ops-bot]
  tiers: [STAFF]
  ips: [10.0.0.0/8]
`

// A banned (locked) or exempt account spends only the rules not keyed by
// user_id: the address failing on it still pays. A banned address spends
// nothing, nor does an exempt one. Each event says which was banned, and
// rate_limit_reports_spared_total why a report spent less.
func TestReportOnHeldAccount(t *testing.T) {
	clock := &fakeClock{now: time.Now()}
	bans := NewBanSet(prometheus.NewRegistry())
	bans.Apply(event.ActionBan, event.ScopeUser, "carol", clock.now.Add(time.Hour))
	bans.Apply(event.ActionBan, event.ScopeIP, "203.0.113.66", clock.now.Add(time.Hour))
	outcomes := &capturePublisher{}
	svc := New(Config{Instance: "test", Now: clock.Now, Bans: bans, Outcomes: outcomes}, compileRules(t, heldRules),
		OpaqueErrors(&modelDecider{mem: decide.NewMemory(), clock: clock}), &capturePublisher{}, zap.NewNop(), prometheus.NewRegistry())
	for i, tc := range []struct {
		name, ip, user, tier string
		debits               []string
		banned, userBanned   bool
		spared               string
	}{
		{"account", "198.51.100.1", "dave", "", []string{"per-ip", "per-ip-user", "per-user"}, false, false, ""},
		{"locked account", "198.51.100.2", "carol", "", []string{"per-ip"}, false, true, sparedUserBanned},
		{"exempt account", "198.51.100.3", "ops-bot", "", []string{"per-ip"}, false, false, sparedUserExempt},
		{"exempt tier", "198.51.100.4", "erin", "staff", []string{"per-ip"}, false, false, sparedUserExempt},
		{"banned address", "203.0.113.66", "dave", "", nil, true, false, sparedBanned},
		{"banned address, locked account", "203.0.113.66", "carol", "", nil, true, false, sparedBanned},
		{"exempt address", "10.1.2.3", "carol", "", nil, false, false, sparedExempt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spared := map[string]float64{}
			for _, r := range []string{sparedBanned, sparedExempt, sparedUserBanned, sparedUserExempt} {
				spared[r] = testutil.ToFloat64(svc.metrics.reportsSpared.WithLabelValues(r))
			}
			req := rules.Request{IP: tc.ip, Addr: netip.MustParseAddr(tc.ip), UserID: tc.user, Tier: tc.tier,
				Endpoint: "/login", Method: "POST", Cost: 1}
			var d Decision
			svc.Report(context.Background(), &req, 401, &d)
			var debited []string
			for j, a := range d.Applied {
				debited = append(debited, a.Rule.ID)
				if d.Results[j].Remaining != 99 {
					t.Errorf("%s: %+v, want debited once", a.Rule.ID, d.Results[j])
				}
			}
			slices.Sort(debited)
			if !slices.Equal(debited, tc.debits) {
				t.Errorf("debited %q, want %q", debited, tc.debits)
			}
			o, err := event.DecodeOutcome(outcomes.events[i])
			if err != nil || o.Banned != tc.banned || o.UserBanned != tc.userBanned || o.UserID != tc.user {
				t.Errorf("event %+v (%v), want banned %v, user_banned %v", o, err, tc.banned, tc.userBanned)
			}
			for r, before := range spared {
				want := before
				if r == tc.spared {
					want++
				}
				if got := testutil.ToFloat64(svc.metrics.reportsSpared.WithLabelValues(r)); got != want {
					t.Errorf("rate_limit_reports_spared_total{reason=%q} = %v, want %v", r, got, want)
				}
			}
		})
	}
}
