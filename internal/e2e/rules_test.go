package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

const dynamicRulesYAML = `
rules:
  - id: login
    match: {endpoints: ["/login"]}
    key: [ip]
    algorithm: fixed_window
    limits: [{requests: 100, per: 1h}]
`

const loginAt3 = `{"id": "login", "match": {"endpoints": ["/login"]}, "key": ["ip"],
	"algorithm": "fixed_window", "limits": [{"requests": 3, "per": "1h"}]}`

// rulesEnv is an env whose rules file holds dynamicRulesYAML.
func rulesEnv(t *testing.T) (*env, string) {
	t.Helper()
	e := newEnv(t)
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(dynamicRulesYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	e.vars["RULES_FILE"] = path
	return e, path
}

// freshIP numbers the client IPs of loginLimit.
var freshIP atomic.Int64

// loginLimit asks lim for a decision on /login from a fresh client IP
// (counting nothing that matters) and returns the limit in force.
func loginLimit(t *testing.T, lim *proc) int64 {
	t.Helper()
	n := freshIP.Add(1)
	return check(t, lim, fmt.Sprintf("10.%d.%d.%d", n>>16&255, n>>8&255, n&255), "/login").Limit
}

// Three limiters on one Redis and one Postgres: a rule lowered through the
// admin API of the first is enforced by the other two within a second
// (announcement, not poll: the poll is an hour here), the audit row
// exists, every instance reports the same version, and an invalid update
// is refused and changes nothing.
func TestDynamicRuleReachesEveryLimiter(t *testing.T) {
	e, _ := rulesEnv(t)
	var lims []*proc
	for i := 1; i <= 3; i++ {
		lims = append(lims, e.start("limiter", "INSTANCE_ID", fmt.Sprintf("l%d", i), "RULES_POLL_INTERVAL", "1h",
			"REDIS_HEALTH_INTERVAL", "200ms"))
	}
	for _, l := range lims {
		if got := loginLimit(t, l); got != 100 {
			t.Fatalf("%s: limit %d before the change; want the file's 100", l.addr, got)
		}
	}

	status, body := adminAs(t, lims[0], http.MethodPut, "/v1/admin/rules/login", loginAt3, "oncall-alice")
	if status != http.StatusCreated {
		t.Fatalf("PUT: %d %s", status, body)
	}
	changed := time.Now()
	for _, l := range lims[1:] {
		testkit.WaitFor(t, time.Second-time.Since(changed), "the lowered limit on "+l.addr, func() bool { return loginLimit(t, l) == 3 })
	}
	t.Logf("applied by instances 2 and 3 %v after the PUT answered", time.Since(changed).Round(time.Millisecond))

	// Enforced across instances: one client, four requests spread over the
	// three limiters; the fourth is denied, in one hour's window.
	testkit.AvoidHourEnd(t)
	for i, l := range []*proc{lims[0], lims[1], lims[2], lims[1]} {
		d := check(t, l, "192.0.2.99", "/login")
		if want := i < 3; d.Allowed != want {
			t.Fatalf("request %d on %s: allowed %v; want %v under the limit of 3", i+1, l.addr, d.Allowed, want)
		}
	}
	db := e.vars["DATABASE_URL"]
	if n := count(t, db, `SELECT count(*) FROM rule_changes WHERE version = 1 AND rule_id = 'login' AND action = 'put'
		AND actor = 'oncall-alice' AND instance = 'l1' AND before IS NULL AND (after->'limits'->0->>'requests')::int = 3`); n != 1 {
		t.Fatalf("audit rows for the change: %d; want 1", n)
	}

	// Every live instance reports the version instance 2 runs.
	testkit.WaitFor(t, 5*time.Second, "every instance to report version 1", func() bool {
		_, body := adminAs(t, lims[1], http.MethodGet, "/v1/admin/rules", "", "")
		return strings.Count(body, `"in_sync":true`) == 3 && strings.Contains(body, `"dynamic_version":1`)
	})

	status, body = adminAs(t, lims[2], http.MethodPut, "/v1/admin/rules/login",
		strings.Replace(loginAt3, `"requests": 3`, `"requests": -1`, 1), "mallory")
	if status != http.StatusBadRequest || !strings.Contains(body, `"field":"limits[0].requests"`) {
		t.Fatalf("invalid PUT: %d %s; want 400 naming limits[0].requests", status, body)
	}
	time.Sleep(300 * time.Millisecond) // room for a wrongly announced change to land
	for _, l := range lims {
		if got := loginLimit(t, l); got != 3 {
			t.Fatalf("%s: limit %d after a refused update; want 3", l.addr, got)
		}
	}
	if n := count(t, db, "SELECT count(*) FROM rule_changes"); n != 1 {
		t.Fatalf("audit rows after a refused update: %d; want 1", n)
	}
}

// A limiter whose Redis connection is cut while a rule changes misses the
// announcement; its poll of the rule store applies the change anyway.
func TestDynamicRulePolledWhenAnnouncementLost(t *testing.T) {
	e, _ := rulesEnv(t)
	l1 := e.start("limiter", "INSTANCE_ID", "l1", "RULES_POLL_INTERVAL", "1h")
	opts, err := redis.ParseURL(redistest.RequiredURL(t))
	if err != nil {
		t.Fatal(err)
	}
	redisProxy := startProxy(t, opts.Addr)
	l2 := e.start("limiter", "INSTANCE_ID", "l2", "RULES_POLL_INTERVAL", "300ms",
		"REDIS_URL", "redis://"+redisProxy.addr+"/0")

	redisProxy.cut() // l2's subscription (and all its Redis traffic) is gone
	if status, body := admin(t, l1, http.MethodPut, "/v1/admin/rules/login", adminToken, loginAt3); status != http.StatusCreated {
		t.Fatalf("PUT: %d %s", status, body)
	}
	testkit.WaitFor(t, 3*time.Second, "l2 to poll the change", func() bool {
		return l2.metric(t, "rate_limit_rules_dynamic_version") == 1
	})
	redisProxy.restore(t)
	testkit.WaitFor(t, 10*time.Second, "l2 to enforce the change", func() bool { return loginLimit(t, l2) == 3 })
}

// The rules file reloads on SIGHUP; an invalid file is refused, counted,
// logged, and the running rules stay.
func TestRulesFileReloadOnSIGHUP(t *testing.T) {
	e, path := rulesEnv(t)
	lim := e.start("limiter", "RULES_POLL_INTERVAL", "1h") // no polling: only the signal reloads
	rewrite(t, path, "requests: 100", "requests: 7")
	if got := loginLimit(t, lim); got != 100 {
		t.Fatalf("limit %d before the signal; want 100", got)
	}
	if err := lim.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 2*time.Second, "the reload on SIGHUP", func() bool { return loginLimit(t, lim) == 7 })

	rewrite(t, path, "fixed_window", "fixed_widow")
	if err := lim.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 2*time.Second, "the invalid file to be refused", func() bool {
		return lim.metric(t, `rate_limit_rules_reloads_total{result="failure",source="file"}`) == 1
	})
	if got := loginLimit(t, lim); got != 7 {
		t.Fatalf("limit %d after an invalid file; want the running 7", got)
	}
	lim.stop(syscall.SIGTERM) // its output is complete and no longer written to
	if out := lim.out.String(); !strings.Contains(out, "rules file refused") || !strings.Contains(out, "fixed_widow") {
		t.Fatalf("the refusal is not logged with its cause:\n%s", out)
	}
}

// The rules file reloads when it changes on disk, without a signal.
func TestRulesFileReloadOnWrite(t *testing.T) {
	e, path := rulesEnv(t)
	lim := e.start("limiter", "RULES_POLL_INTERVAL", "200ms")
	rewrite(t, path, "requests: 100", "requests: 8")
	testkit.WaitFor(t, 3*time.Second, "the reload on write", func() bool { return loginLimit(t, lim) == 8 })
	rewrite(t, path, "key: [ip]", "key: [ipv6]")
	testkit.WaitFor(t, 3*time.Second, "the invalid file to be refused", func() bool {
		return lim.metric(t, `rate_limit_rules_reloads_total{result="failure",source="file"}`) == 1
	})
	if got := loginLimit(t, lim); got != 8 {
		t.Fatalf("limit %d after an invalid file; want the running 8", got)
	}
}

// rewrite replaces old by new in the file at path, atomically (write and
// rename, as editors and Kubernetes ConfigMaps do).
func rewrite(t *testing.T, path, old, new string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), old) {
		t.Fatalf("%s does not contain %q", path, old)
	}
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(strings.Replace(string(data), old, new, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// adminAs sends an admin request with the env's token, as actor.
func adminAs(t *testing.T, lim *proc, method, path, body, actor string) (int, string) {
	t.Helper()
	return admin(t, lim, method, path, adminToken, body, "X-Actor", actor)
}
