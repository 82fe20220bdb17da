package e2e

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// Leased budgets (issue 36), on real processes: whatever the limiters lease
// and give back, the sum they admit in a window never passes the limit, and
// falls short of it by at most I×M units (I limiter instances, M a lease's
// max units). Every rule here is one hot key shared by every client
// (key: [endpoint]), denied rather than decided locally when Redis fails,
// so that every admission counted was debited in Redis.

// leaseWindow is the window of the window rules: a round fits in one window
// of Redis's clock, so the whole round is held to one budget.
const leaseWindow = 24 * time.Hour

// The token-bucket rules refill bucketRate tokens a second up to
// bucketBurst: fast enough that the bucket refills while leases are out.
const bucketRate, bucketBurst = 500, 2000

// leaseCase is one algorithm of a leased rule.
type leaseCase struct {
	algorithm string
	limits    string // the rule's limits, as YAML
	lease     string // the rule's lease setting, as YAML
	quota     int64  // requests per window, or burst
	maxUnits  int64  // M: max_units, or its default max(1, quota/64)
}

var leaseCases = []leaseCase{
	{"fixed_window", "[{requests: 3000, per: 24h}]", "true", 3000, 3000 / 64},
	{"sliding_window_counter", "[{requests: 3000, per: 24h}]", "{max_units: 50}", 3000, 50},
	{"token_bucket", fmt.Sprintf("[{rate: %d, per: 1s, burst: %d}]", bucketRate, bucketBurst), "{max_units: 100}", bucketBurst, 100},
}

// shortWindowCases are window rules whose windows turn during a round:
// window leases end with their window, and none may be spent in the next.
var shortWindowCases = []leaseCase{
	{"fixed_window", "[{requests: 500, per: 1s}]", "{max_units: 20}", 500, 20},
	{"sliding_window_counter", "[{requests: 500, per: 1s}]", "{max_units: 20}", 500, 20},
}

func (c leaseCase) bucket() bool { return c.algorithm == "token_bucket" }

// endpoint is the hot endpoint (and rule id) of c in one round.
func (c leaseCase) endpoint(round string) string { return "/" + c.algorithm + "-" + round }

// leaseRules is a rules file with one leased rule per case and round.
func leaseRules(cases []leaseCase, rounds ...string) string {
	var b strings.Builder
	b.WriteString("rules:\n")
	for _, c := range cases {
		for _, r := range rounds {
			fmt.Fprintf(&b, "  - {id: %s-%s, match: {endpoints: [%q]}, key: [endpoint], algorithm: %s, limits: %s, lease: %s, on_redis_failure: deny}\n",
				c.algorithm, r, c.endpoint(r), c.algorithm, c.limits, c.lease)
		}
	}
	return b.String()
}

// startLeaseLimiters starts n limiters at once on rules, with e's
// environment and vars (name, value pairs) over it. REDIS_TIMEOUT is
// generous: a loaded machine must not look like a failed Redis. A lease
// covers a second of traffic, so that a light load holds leases as large
// as a flood's (max_units): what a warm round meets in hand is then large.
func startLeaseLimiters(t *testing.T, n int, rules string, vars ...string) []*proc {
	t.Helper()
	e := newEnvWith(t, rules)
	var lims []*proc
	for i := range n {
		env := map[string]string{}
		for k, v := range e.vars {
			env[k] = v
		}
		env["DYNAMIC_RULES"], env["REDIS_TIMEOUT"], env["LEASE_HORIZON"] = "false", "2s", "1s"
		env["INSTANCE_ID"] = fmt.Sprintf("lease-%d", i+1)
		for j := 0; j+1 < len(vars); j += 2 {
			env[vars[j]] = vars[j+1]
		}
		lims = append(lims, launch(t, "limiter", env))
	}
	for _, l := range lims {
		if err := l.await("/readyz", 15*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	return lims
}

// leaseRound floods c's hot key of round through every limiter from 200
// clients each until the budget is spent, and holds the admissions to it.
// Warm, a light load runs first until every limiter holds a lease: the
// flood meets leases in hand. For a window the light load goes on under
// the flood and counts in the window; for a token bucket it runs over a
// lease slot below the refill rate (leases out while the bucket refills to
// its cap) and stops before the flood, whose admissions alone are held to
// the bucket: at most its burst plus the refill over the flood, whatever
// the leases in hand when it starts.
func leaseRound(t *testing.T, lims []*proc, rdb redis.UniversalClient, c leaseCase, round string, warm bool) {
	t.Helper()
	endpoint := c.endpoint(round)
	if c.bucket() {
		awaitLeasesReleased(t, lims) // the lease gauges then speak of this round's key alone
	} else {
		avoidWindowEnd(t, rdb, leaseWindow)
	}
	before := allLeaseMetrics(t, lims)
	t0 := redisNow(t, rdb)
	var light *flood
	if warm {
		light = startFlood(t, lims, 2, endpoint, 20*time.Millisecond) // about 300 checks a second in all
		testkit.WaitFor(t, 15*time.Second, "every limiter to hold a lease", func() bool {
			for i, l := range lims {
				if l.metric(t, "rate_limit_lease_decisions_total")-before[i].decisions < 10 || l.metric(t, "rate_limit_lease_units") == 0 {
					return false
				}
			}
			return true
		})
		if n := light.admitted(); n >= c.quota/2 {
			t.Fatalf("the light load spent %d of %d before the flood: nothing left to test", n, c.quota)
		}
		if c.bucket() {
			time.Sleep(1200 * time.Millisecond)
			light.stop()
			light.requireAnswered(t)
		}
	}
	held := allLeaseMetrics(t, lims)
	tFlood := redisNow(t, rdb)
	heavy := startFlood(t, lims, 200, endpoint, 0)
	if c.bucket() {
		// The refill never stops: flood a while after every limiter denies.
		testkit.WaitFor(t, 20*time.Second, "every limiter to deny", func() bool { return heavy.deniedEverywhere(200) })
		time.Sleep(500 * time.Millisecond)
	} else {
		testkit.WaitFor(t, 20*time.Second, "every limiter to deny 300 checks in a row", func() bool { return heavy.exhausted(300) })
	}
	heavy.stop()
	admitted := heavy.admitted()
	if light != nil {
		light.stop()
		if !c.bucket() {
			admitted += light.admitted()
		}
	}
	t1 := redisNow(t, rdb)
	for _, f := range []*flood{light, heavy} {
		if f != nil {
			f.requireAnswered(t)
			f.requireDecidedInRedis(t)
		}
	}
	after := allLeaseMetrics(t, lims)

	ceiling := c.quota
	if c.bucket() {
		// Redis decides at whole ms: the flood's span is at most
		// ceil(t1) - floor(tFlood).
		span := int64(math.Ceil(float64(t1.UnixMicro())/1000)) - tFlood.UnixMilli()
		ceiling += bucketRate * span / 1000
	} else {
		requireOneWindow(t, t0, t1, leaseWindow)
	}
	floor := c.quota - int64(len(lims))*c.maxUnits
	t.Logf("%s %s: %d admitted, at most %d, at least %d (quota %d, M %d; flood %v on Redis's clock); %s",
		c.algorithm, round, admitted, ceiling, floor, c.quota, c.maxUnits, t1.Sub(tFlood).Round(time.Millisecond), heavy.summary())
	logLeaseDeltas(t, before, held, after)
	if admitted > ceiling {
		t.Errorf("%d admitted across %d limiters, more than the %d the key allows", admitted, len(lims), ceiling)
	}
	if c.bucket() {
		// Lent units nobody admitted (lapsed with their slot, or held at
		// the end) left the bucket as surely as admitted ones: with them,
		// the bound is tight, and a bucket refilling past its cap while
		// leases are out shows even when lapses hide it in the admissions.
		var unspent float64
		for i := range lims {
			unspent += held[i].units + after[i].granted - held[i].granted - (after[i].decisions - held[i].decisions) - (after[i].returned - held[i].returned)
		}
		t.Logf("%v units lent in the flood or held at its start were never admitted: %v taken from the bucket, at most %d", unspent, float64(admitted)+unspent, ceiling)
		if float64(admitted)+unspent > float64(ceiling) {
			t.Errorf("%d admitted and %v lent but never admitted: %v taken from a bucket that holds at most %d over the flood",
				admitted, unspent, float64(admitted)+unspent, ceiling)
		}
	}
	if admitted < floor {
		t.Errorf("%d admitted once every limiter was denied: %d short of the quota %d, past the bound I×M = %d",
			admitted, c.quota-admitted, c.quota, c.quota-floor)
	}
	for i := range lims {
		if after[i].decisions <= before[i].decisions {
			t.Errorf("limiter-%d answered no decision from a lease: the round did not test leases", i+1)
		}
	}
}

func logLeaseDeltas(t *testing.T, before, held, after []leaseMetrics) {
	t.Helper()
	var b strings.Builder
	for i := range before {
		fmt.Fprintf(&b, "limiter-%d %v decisions, %v units granted, %v returned, %v held at the flood; ",
			i+1, after[i].decisions-before[i].decisions, after[i].granted-before[i].granted,
			after[i].returned-before[i].returned, held[i].units)
	}
	t.Logf("leases: %s", b.String())
}

// shortWindowsRound floods c's hot key for about three windows of a
// second. Each window admits at most the limit (for the counter too: its
// current window's count never passes the limit), so the windows the round
// touched on Redis's clock bound the admissions. Each window lying wholly
// inside the round is spent but for what the leases strand, I×M at most: a
// limit of 500 a second is far below what even a slow machine floods.
func shortWindowsRound(t *testing.T, lims []*proc, rdb redis.UniversalClient, c leaseCase) {
	t.Helper()
	before := allLeaseMetrics(t, lims)
	t0 := redisNow(t, rdb)
	f := startFlood(t, lims, 200, c.endpoint("short"), 0)
	time.Sleep(3 * time.Second)
	f.stop()
	t1 := redisNow(t, rdb)
	f.requireAnswered(t)
	f.requireDecidedInRedis(t)
	after := allLeaseMetrics(t, lims)

	touched := t1.UnixMilli()/1000 - t0.UnixMilli()/1000 + 1
	whole := max(0, touched-2)
	ceiling, floor := c.quota*touched, whole*(c.quota-int64(len(lims))*c.maxUnits)
	admitted := f.admitted()
	t.Logf("%s, windows of 1s: %d admitted over %d windows (%d whole), at most %d, at least %d; %s",
		c.algorithm, admitted, touched, whole, ceiling, floor, f.summary())
	logLeaseDeltas(t, before, before, after)
	if admitted > ceiling {
		t.Errorf("%d admitted over %d windows of %d: a lease outlived its window", admitted, touched, c.quota)
	}
	if admitted < floor {
		t.Errorf("%d admitted over %d windows, %d of them whole: fewer than %d, past the I×M bound per window", admitted, touched, whole, floor)
	}
	for i := range lims {
		if after[i].decisions <= before[i].decisions {
			t.Errorf("limiter-%d answered no decision from a lease: the round did not test leases", i+1)
		}
	}
}

// awaitLeasesReleased waits until no limiter holds a lease: with no
// traffic, every key goes idle and its unused units go back.
func awaitLeasesReleased(t *testing.T, lims []*proc) {
	t.Helper()
	testkit.WaitFor(t, 10*time.Second, "every limiter to let its idle leases go", func() bool {
		for _, l := range lims {
			if l.metric(t, "rate_limit_lease_keys") != 0 {
				return false
			}
		}
		return true
	})
}

// Three limiters on the shared Redis, 200 clients each on one hot key, for
// every algorithm: cold (no lease anywhere when the flood starts) and warm
// (every limiter answering from leases when it starts).
func TestLeasedNeverExceedsLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("floods of 600 clients")
	}
	rules := leaseRules(leaseCases, "cold", "warm") + strings.TrimPrefix(leaseRules(shortWindowCases, "short"), "rules:\n")
	lims := startLeaseLimiters(t, 3, rules)
	rdb := redistest.Client(t)
	for _, c := range leaseCases {
		t.Run(c.algorithm, func(t *testing.T) {
			t.Run("cold", func(t *testing.T) { leaseRound(t, lims, rdb, c, "cold", false) })
			t.Run("warm", func(t *testing.T) { leaseRound(t, lims, rdb, c, "warm", true) })
		})
	}
	for _, c := range shortWindowCases {
		t.Run(c.algorithm+"/windows", func(t *testing.T) { shortWindowsRound(t, lims, rdb, c) })
	}
	awaitLeasesReleased(t, lims)
}

// The same on a Redis Cluster of three primaries and three replicas, the
// limiters knowing only the cluster.
func TestLeasedNeverExceedsLimitOnCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("a six-node cluster and floods of 600 clients")
	}
	cluster := redistest.StartCluster(t, 3, 1)
	cc := cluster.Client(t)
	lims := startLeaseLimiters(t, 3, leaseRules(leaseCases, "cold"),
		"REDIS_URL", "redis://127.0.0.1:1/0",
		"REDIS_CLUSTER_ADDRS", strings.Join(cluster.Addrs(), ","),
		"REDIS_KEY_PREFIX", redistest.Prefix(t, cc))
	for _, c := range leaseCases {
		t.Run(c.algorithm, func(t *testing.T) { leaseRound(t, lims, cc, c, "cold", false) })
	}
}
