package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/kafkatest"
	"github.com/ratewarden/ratewarden/internal/testkit/proctest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// leaseOutageMaxUnits is the max_units of the rules below.
const leaseOutageMaxUnits = 200

// leaseOutageRules are hot keys leased from a budget that never runs out
// in the test: one denying and one limiting locally when Redis fails, and a
// token bucket whose leases end with their lease slot (decide.LeaseSlot).
var leaseOutageRules = fmt.Sprintf(`
rules:
  - {id: down-deny, match: {endpoints: ["/down-deny"]}, key: [endpoint], algorithm: fixed_window,
     limits: [{requests: 1000000, per: 24h}], lease: {max_units: %[1]d}, on_redis_failure: deny}
  - {id: down-local, match: {endpoints: ["/down-local"]}, key: [endpoint], algorithm: fixed_window,
     limits: [{requests: 1000000, per: 24h}], lease: {max_units: %[1]d}, on_redis_failure: local}
  - {id: down-lapse, match: {endpoints: ["/down-lapse"]}, key: [endpoint], algorithm: token_bucket,
     limits: [{rate: 1000000, per: 1s, burst: 1000000}], lease: {max_units: %[1]d}, on_redis_failure: deny}
`, leaseOutageMaxUnits)

// leaseSlot is how long a token bucket's lease may last (decide.LeaseSlot).
const leaseSlot = decide.LeaseSlot * time.Millisecond

// outageCheck is one sequential check's answer during the outage.
type outageCheck struct {
	status  int
	allowed bool
	mode    string
}

func checkDuringOutage(t *testing.T, httpc *http.Client, addr, endpoint string) outageCheck {
	t.Helper()
	resp, err := httpc.Post("http://"+addr+"/v1/check", "application/json",
		strings.NewReader(fmt.Sprintf(`{"ip":"198.18.9.9","endpoint":%q}`, endpoint)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	a := outageCheck{status: resp.StatusCode}
	var d struct {
		Allowed bool   `json:"allowed"`
		Mode    string `json:"mode"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil && resp.StatusCode == http.StatusOK {
		t.Fatalf("status 200: %v", err)
	}
	a.allowed, a.mode = d.Allowed, d.Mode
	return a
}

// leading counts the answers at the head of as for which keep holds.
func leading(as []outageCheck, keep func(outageCheck) bool) int {
	for i, a := range as {
		if !keep(a) {
			return i
		}
	}
	return len(as)
}

// A limiter holding leases when Redis dies goes on admitting from them, and
// only then applies each rule's failure policy: 503 for deny, in-memory
// limiting for local. It never admits more than it holds (at most a
// lease's max units per key), and nothing from a lease past its end: a
// token bucket's lease lapses with its slot, Redis or not.
func TestLeaseOutlivesRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("a private redis-server killed mid-test")
	}
	// Window leases end with their day's window: every unit held must still
	// be spendable when the outage spends them.
	testkit.AvoidWindowEnd(t, 24*time.Hour, time.Minute)
	_, port, _ := net.SplitHostPort(proctest.FreeAddr(t))
	rds := redistest.StartServerAt(t, "127.0.0.1:"+port)
	broker := kafkatest.StartBroker(t, decisionsTopic, bansTopic, outcomesTopic)
	lim := start(t, "limiter", map[string]string{
		"REDIS_URL":             "redis://127.0.0.1:" + port + "/0",
		"REDIS_KEY_PREFIX":      "rwtest:lease-outage:",
		"KAFKA_BROKERS":         broker.Addr(),
		"RULES_FILE":            writeRules(t, leaseOutageRules),
		"INSTANCE_ID":           "lease-outage-1",
		"REDIS_HEALTH_INTERVAL": "200ms",
		"REDIS_FAILED_CHECKS":   "3",
		"PERMISSIVE_AFTER":      "0",
		"DYNAMIC_RULES":         "false",
		"LEASE_IDLE":            "1m", // the leases stay in hand while the test waits for the outage
		"LEASE_HORIZON":         "1s", // and are as large as max_units allows
	})
	testkit.WaitFor(t, 5*time.Second, "mode redis", func() bool { return readyMode(t, lim) == "redis" })

	endpoints := []string{"/down-deny", "/down-local"}
	var warm []*flood
	for _, ep := range append(endpoints, "/down-lapse") {
		warm = append(warm, startFlood(t, []*proc{lim}, 4, ep, time.Millisecond))
	}
	testkit.WaitFor(t, 10*time.Second, "leases on the three keys", func() bool {
		return lim.metric(t, "rate_limit_lease_keys") >= 3 && lim.metric(t, "rate_limit_lease_decisions_total") >= 6*leaseOutageMaxUnits
	})
	for _, f := range warm {
		f.stop()
		f.requireAnswered(t)
	}
	// The units in hand, once no renewal is out: what the outage may spend.
	var held float64
	testkit.WaitFor(t, 5*time.Second, "the units held to settle", func() bool {
		before := lim.metric(t, "rate_limit_lease_units")
		time.Sleep(100 * time.Millisecond)
		held = lim.metric(t, "rate_limit_lease_units")
		return held == before
	})
	if held < 3 {
		t.Fatalf("%v units held on three hot keys when Redis dies: nothing to test", held)
	}

	killed := time.Now()
	rds.Kill()
	testkit.WaitFor(t, 5*time.Second, "/readyz mode local", func() bool { return readyMode(t, lim) == "local" })

	httpc := &http.Client{Timeout: 2 * time.Second}
	var spent float64
	for _, ep := range endpoints {
		before := lim.metric(t, "rate_limit_lease_decisions_total")
		var as []outageCheck
		for range int(held) + 50 { // held covers both keys: every unit of this one, and 50 checks past it
			as = append(as, checkDuringOutage(t, httpc, lim.addr, ep))
		}
		fromLease := lim.metric(t, "rate_limit_lease_decisions_total") - before
		admitted := leading(as, func(a outageCheck) bool { return a.status == http.StatusOK && a.allowed })
		spent += fromLease
		t.Logf("%s with Redis down: %d admitted in a row, %v decisions from the lease; last answer %+v",
			ep, admitted, fromLease, as[len(as)-1])
		if fromLease < 1 {
			t.Errorf("%s: no decision answered from the lease in hand once Redis was down", ep)
		}
		if fromLease > leaseOutageMaxUnits {
			t.Errorf("%s: %v decisions from a lease with Redis down, more than the lease's %d units", ep, fromLease, leaseOutageMaxUnits)
		}
		rest := as[len(as)-50:]
		switch ep {
		case "/down-deny":
			if admitted < 1 || float64(admitted) != fromLease {
				t.Errorf("%s: %d admissions with Redis down, %v from the lease: want every admission, at least one, from the lease (first answer %+v)",
					ep, admitted, fromLease, as[0])
			}
			if n := leading(as[admitted:], func(a outageCheck) bool { return a.status == http.StatusServiceUnavailable }); admitted+n != len(as) {
				t.Errorf("%s: after %d admissions from the lease, answer %d was %+v; want 503 (on_redis_failure: deny) from then on",
					ep, admitted, admitted+n, as[admitted+n])
			}
		case "/down-local":
			if n := leading(rest, func(a outageCheck) bool { return a.status == http.StatusOK && a.mode == "local" }); n != len(rest) {
				t.Errorf("%s: once the lease was spent, answer %+v; want mode local (on_redis_failure: local)", ep, rest[n])
			}
		}
	}
	// What is left is the bucket's lease, unspent.
	bucketHeld := lim.metric(t, "rate_limit_lease_units")
	t.Logf("%v units held when Redis died, %v spent from the window leases after, %v left in the bucket's", held, spent, bucketHeld)
	if spent != held-bucketHeld {
		t.Errorf("%v decisions answered from the window leases with Redis down, holding %v units: want every unit held spent, and no more",
			spent, held-bucketHeld)
	}

	if bucketHeld == 0 {
		t.Fatal("no unit left in the bucket's lease: its lapse is not tested")
	}
	time.Sleep(time.Until(killed.Add(leaseSlot + 100*time.Millisecond))) // every lease granted before the kill has ended
	before := lim.metric(t, "rate_limit_lease_decisions_total")
	for range 50 {
		if a := checkDuringOutage(t, httpc, lim.addr, "/down-lapse"); a.status != http.StatusServiceUnavailable {
			t.Fatalf("/down-lapse a lease slot after Redis died: %+v, want 503: its lease has ended, and with it the units it held", a)
		}
	}
	if n := lim.metric(t, "rate_limit_lease_decisions_total") - before; n != 0 {
		t.Errorf("/down-lapse: %v decisions from a lease past its slot", n)
	}
}
