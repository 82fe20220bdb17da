package e2e

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// A limiter SIGKILLed while it holds a lease loses the lease's units: they
// stay debited until the window ends, and nobody spends them twice. The
// other two limiters spend the rest of the budget.
func TestLeasedKilledLimiterNeverDoubleSpends(t *testing.T) {
	if testing.Short() {
		t.Skip("floods of 600 clients")
	}
	const limit, maxUnits = 15000, 100
	c := leaseCase{"fixed_window", fmt.Sprintf("[{requests: %d, per: 24h}]", limit), fmt.Sprintf("{max_units: %d}", maxUnits), limit, maxUnits}
	lims := startLeaseLimiters(t, 3, leaseRules([]leaseCase{c}, "kill"))
	rdb := redistest.Client(t)
	avoidWindowEnd(t, rdb, leaseWindow)
	t0 := redisNow(t, rdb)
	f := startFlood(t, lims, 200, c.endpoint("kill"), 0)
	victim := lims[2] // f.per[2]
	var units float64
	testkit.WaitFor(t, 20*time.Second, "the victim to hold a lease, having answered from leases", func() bool {
		if victim.metric(t, "rate_limit_lease_decisions_total") < 2*maxUnits {
			return false
		}
		units = victim.metric(t, "rate_limit_lease_units")
		return units > 0
	})
	victim.stop(syscall.SIGKILL)
	spentBefore := f.admitted()
	if units > maxUnits {
		t.Errorf("the victim held %v units of one key, more than its max_units %d", units, maxUnits)
	}
	if spentBefore >= limit*3/4 {
		t.Fatalf("%d of %d spent before the kill: too late to test a lease lost mid-window", spentBefore, limit)
	}
	testkit.WaitFor(t, 20*time.Second, "the survivors to deny 300 checks in a row", func() bool { return f.exhausted(300) })
	f.stop()
	t1 := redisNow(t, rdb)
	requireOneWindow(t, t0, t1, leaseWindow)
	f.requireDecidedInRedis(t)
	for i, l := range lims[:2] {
		if n := f.per[i].failed.Load(); n > 0 {
			t.Fatalf("limiter-%d (alive) failed %d checks: %s", i+1, n, f.summary())
		}
		if l.metric(t, "rate_limit_lease_decisions_total") == 0 {
			t.Errorf("limiter-%d answered no decision from a lease", i+1)
		}
	}

	// The victim's checks in flight when it died (one per client at most)
	// may have been decided, in Redis or from its lease, and debited: lost
	// with it, as without leases. The leases strand at most I×M besides.
	admitted, unanswered := f.admitted(), f.per[2].cut.Load()
	floor := limit - 3*maxUnits - unanswered
	t.Logf("%d admitted of %d (%d before the kill; at least %d): %d short; the victim held %v units when killed, %d checks in flight; %s",
		admitted, limit, spentBefore, floor, limit-admitted, units, unanswered, f.summary())
	if admitted > limit {
		t.Errorf("%d admitted, more than the limit of %d: a killed limiter's lease was spent twice", admitted, limit)
	}
	if admitted < floor {
		t.Errorf("%d admitted: %d short of the limit, past the bound I×M = %d plus the %d checks in flight at the kill",
			admitted, limit-admitted, 3*maxUnits, unanswered)
	}
}
