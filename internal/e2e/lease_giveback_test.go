package e2e

import (
	"syscall"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// Units given back are a window's again: two limiters hold leases of a hot
// key, one is stopped (SIGTERM) and the other goes idle; both give back
// what they hold, so the third, flooding the key alone, admits exactly the
// rest of the limit. Nothing is stranded: the I×M bound is for leases
// nobody gave back.
func TestLeaseGivenBackOnStopAndIdle(t *testing.T) {
	if testing.Short() {
		t.Skip("a flood of 200 clients")
	}
	c := leaseCases[0] // fixed_window, lease: true
	lims := startLeaseLimiters(t, 3, leaseRules([]leaseCase{c}, "giveback"))
	rdb := redistest.Client(t)
	endpoint := c.endpoint("giveback")
	avoidWindowEnd(t, rdb, leaseWindow)
	t0 := redisNow(t, rdb)

	stopped, idle, flooding := lims[0], lims[1], lims[2]
	light := startFlood(t, []*proc{stopped, idle}, 8, endpoint, 2*time.Millisecond)
	testkit.WaitFor(t, 15*time.Second, "both limiters to hold a lease", func() bool {
		return stopped.metric(t, "rate_limit_lease_units") >= 10 && idle.metric(t, "rate_limit_lease_units") >= 10
	})
	light.stop()
	light.requireAnswered(t)
	held := []float64{stopped.metric(t, "rate_limit_lease_units"), idle.metric(t, "rate_limit_lease_units")}
	stopped.stop(syscall.SIGTERM)
	testkit.WaitFor(t, 10*time.Second, "the idle limiter to give its lease back", func() bool {
		return idle.metric(t, "rate_limit_lease_units") == 0 && idle.metric(t, "rate_limit_lease_units_returned_total") > 0
	})

	heavy := startFlood(t, []*proc{flooding}, 200, endpoint, 0)
	testkit.WaitFor(t, 20*time.Second, "the flooding limiter to deny 300 checks in a row", func() bool { return heavy.exhausted(300) })
	heavy.stop()
	t1 := redisNow(t, rdb)
	requireOneWindow(t, t0, t1, leaseWindow)
	heavy.requireAnswered(t)
	heavy.requireDecidedInRedis(t)

	admitted := light.admitted() + heavy.admitted()
	t.Logf("%d admitted of %d: %d before, holding %v units (stopped) and %v (idle, %v given back), then %d by the third limiter alone, %v from its leases",
		admitted, c.quota, light.admitted(), held[0], held[1], idle.metric(t, "rate_limit_lease_units_returned_total"),
		heavy.admitted(), flooding.metric(t, "rate_limit_lease_decisions_total"))
	if admitted != c.quota {
		t.Errorf("%d admitted, want exactly the limit %d: the units given back on stop and on idle must be spendable again", admitted, c.quota)
	}
	if flooding.metric(t, "rate_limit_lease_decisions_total") == 0 {
		t.Errorf("the flooding limiter answered no decision from a lease")
	}
}
