package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/kafkatest"
	"github.com/ratewarden/ratewarden/internal/testkit/pgtest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

const (
	decisionsTopic = "ratelimit.decisions"
	bansTopic      = "ratelimit.bans"
	outcomesTopic  = "ratelimit.outcomes"
	rulesYAML      = `
rules:
  - id: api
    match: {endpoints: ["/api/**"]}
    key: [ip]
    algorithm: token_bucket
    limits: [{rate: 1000, per: 1s, burst: 1000}]
detection:
  warn: {violations: 20, within: 5m}
  ban: [{violations: 100, within: 1h, duration: 1h}]
  scan: {distinct_endpoints: 50, within: 10s, duration: 1h}
`
)

// adminToken is the limiters' ADMIN_TOKEN: 16 bytes at least, or they
// refuse to start.
const adminToken = "e2e-admin-token-0123456789"

// env is one isolated system: its own broker, key prefix and rules file.
type env struct {
	t      *testing.T
	broker *kafkatest.Broker
	vars   map[string]string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvWith(t, rulesYAML)
}

// newEnvWith is newEnv with a rules file of its own.
func newEnvWith(t *testing.T, rulesFile string) *env {
	t.Helper()
	broker := kafkatest.StartBroker(t, decisionsTopic, bansTopic, outcomesTopic)
	e := newEnvOn(t, rulesFile, broker.Addr())
	e.broker = broker
	return e
}

// newEnvOn is newEnvWith on the broker at brokerAddr, which the test
// started (e.broker is nil).
func newEnvOn(t *testing.T, rulesFile, brokerAddr string) *env {
	t.Helper()
	rules := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rules, []byte(rulesFile), 0o600); err != nil {
		t.Fatal(err)
	}
	return &env{t: t, vars: map[string]string{
		"KAFKA_BROKERS":     brokerAddr,
		"REDIS_URL":         redistest.RequiredURL(t),
		"REDIS_KEY_PREFIX":  redistest.Prefix(t, redistest.Client(t)),
		"RULES_FILE":        rules,
		"DETECTOR_GROUP_ID": "detector-" + fmt.Sprint(time.Now().UnixNano()),
		"ADMIN_TOKEN":       adminToken,
		"DATABASE_URL":      pgtest.Database(t), // dynamic rules; the archiver's tables too
	}}
}

// brokers are the Kafka brokers of the services.
func (e *env) brokers() []string { return strings.Split(e.vars["KAFKA_BROKERS"], ",") }

func (e *env) start(name string, extra ...string) *proc {
	e.t.Helper()
	vars := map[string]string{}
	for k, v := range e.vars {
		vars[k] = v
	}
	for i := 0; i+1 < len(extra); i += 2 {
		vars[extra[i]] = extra[i+1]
	}
	return start(e.t, name, vars)
}

// startNiced is start under nice -n 19: the process gets the CPU only
// when processes of normal priority leave it some.
func (e *env) startNiced(name string, extra ...string) *proc {
	e.t.Helper()
	vars := map[string]string{}
	for k, v := range e.vars {
		vars[k] = v
	}
	for i := 0; i+1 < len(extra); i += 2 {
		vars[extra[i]] = extra[i+1]
	}
	p := launchUnder(e.t, name, vars, "nice", "-n", "19")
	if err := p.await("/readyz", 15*time.Second); err != nil {
		e.t.Fatal(err)
	}
	return p
}

type decision struct {
	Status  int
	Allowed bool   `json:"allowed"`
	Reason  string `json:"reason"`
	Limit   int64  `json:"limit"`
	Mode    string `json:"mode"`
}

func check(t *testing.T, limiter *proc, ip, endpoint string) decision {
	t.Helper()
	return postCheck(t, limiter, fmt.Sprintf(`{"ip":%q,"endpoint":%q}`, ip, endpoint))
}

// postCheck sends body to the limiter's /v1/check and returns its answer.
func postCheck(t *testing.T, limiter *proc, body string) decision {
	t.Helper()
	resp, err := http.Post("http://"+limiter.addr+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	d := decision{Status: resp.StatusCode}
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
		t.Fatal(err)
	}
	return d
}

// waitConsuming waits until the detector has consumed n events, i.e. it has
// joined its group and caught up.
func waitConsuming(t *testing.T, detector *proc, n float64) {
	t.Helper()
	testkit.WaitFor(t, 30*time.Second, fmt.Sprintf("the detector to consume %v events", n), func() bool {
		return detector.metric(t, "rate_limit_detector_events_total", `source="decisions"`) >= n
	})
}

func bans(t *testing.T, e *env, n int) []event.Ban {
	t.Helper()
	var out []event.Ban
	for _, m := range kafkatest.ReadMessages(t, e.brokers(), bansTopic, n, 15*time.Second) {
		b, err := event.DecodeBan(m.Value)
		if err != nil {
			t.Fatalf("ban message %s: %v", m.Value, err)
		}
		if string(m.Key) != b.Scope+":"+b.Subject {
			t.Errorf("ban message key %q, want scope:subject", m.Key)
		}
		out = append(out, b)
	}
	return out
}

// scanUntilBanned sends a scanner's requests for 60 distinct endpoints over
// about 5 s through the limiter (more until it is banned, 120 at most), a
// normal client's alongside, which must never be denied, and returns how
// long after its 50th distinct endpoint (the scan threshold) the limiter
// first answered that the scanner is banned.
func scanUntilBanned(t *testing.T, limiter, detector *proc, scanner, normal string) time.Duration {
	t.Helper()
	var crossed, bannedAt time.Time
	for i := 0; i < 60 || bannedAt.IsZero(); i++ {
		if i > 120 {
			t.Fatalf("scanner never banned; detector bans metric %v", detector.metric(t, "rate_limit_detector_bans_total", `source="decisions"`))
		}
		d := check(t, limiter, scanner, fmt.Sprintf("/api/scan/%d", i))
		if i == 49 {
			crossed = time.Now()
		}
		if d.Reason == event.ReasonBanned && bannedAt.IsZero() {
			bannedAt = time.Now()
		}
		n := check(t, limiter, normal, "/api/books/1")
		for try := 0; n.Reason != event.ReasonOK && n.Mode == "local" && try < 3; try++ {
			// A round trip past REDIS_TIMEOUT on a loaded machine is refused,
			// not limited: that is the machine's speed, not the scan's doing.
			n = check(t, limiter, normal, "/api/books/1")
		}
		if n.Reason != event.ReasonOK {
			t.Fatalf("normal client got %+v", n)
		}
		time.Sleep(5 * time.Second / 60)
	}
	return bannedAt.Sub(crossed)
}

// A client touching 60 distinct endpoints in 5 s is banned for scanning and
// denied by the limiter within a second of crossing the threshold of 50; a
// normal client alongside is never banned.
func TestScanIsBannedWithinASecond(t *testing.T) {
	e := newEnv(t)
	detector := e.start("detector")
	limiter := e.start("limiter", "TRUSTED_PROXIES", "127.0.0.1")
	const scanner, normal = "203.0.113.66", "198.51.100.10"
	check(t, limiter, normal, "/api/books/1")
	waitConsuming(t, detector, 1)

	if delay := scanUntilBanned(t, limiter, detector, scanner, normal); delay > time.Second {
		t.Errorf("the limiter denied the scanner %v after it crossed the threshold, want ≤ 1s", delay)
	} else {
		t.Logf("ban enforced %v after the 50th distinct endpoint", delay)
	}
	for _, tc := range []struct {
		client string
		status int
	}{{scanner, http.StatusForbidden}, {normal, http.StatusOK}} {
		req, _ := http.NewRequest(http.MethodGet, "http://"+limiter.addr+"/v1/auth", nil)
		req.Header.Set("X-Forwarded-Uri", "/api/x")
		req.Header.Set("X-Forwarded-For", tc.client)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.status || (tc.status == http.StatusForbidden && resp.Header.Get("Retry-After") == "") {
			t.Fatalf("/v1/auth for %s: %d (Retry-After %q), want %d", tc.client, resp.StatusCode, resp.Header.Get("Retry-After"), tc.status)
		}
	}

	got := bans(t, e, 1)
	b := got[0]
	if b.Action != event.ActionBan || b.Scope != event.ScopeIP || b.Subject != scanner || b.Reason != "scan" ||
		b.Count < 50 || b.Threshold != 50 || b.WindowS != 10 || b.DurationS != 3600 || b.Source != "detector" ||
		len(b.Evidence.SampleEndpoints) == 0 || b.Evidence.FirstTS.IsZero() || !b.Evidence.LastTS.After(b.Evidence.FirstTS) ||
		b.ExpiresAt.Before(time.Now().Add(50*time.Minute)) {
		t.Fatalf("ban message: %+v", b)
	}
}

// A scan split across a detector restart (SIGKILL) still bans, and
// re-reading every message (a new consumer group) issues no second ban.
func TestDetectorRestartAndRedelivery(t *testing.T) {
	t.Parallel() // it mostly waits; see the Makefile's unit target
	e := newEnv(t)
	limiter := e.start("limiter")
	first := e.start("detector")
	const scanner = "203.0.113.77"
	for i := range 30 {
		check(t, limiter, scanner, fmt.Sprintf("/api/a/%d", i))
	}
	waitConsuming(t, first, 30)
	first.stop(syscall.SIGKILL)

	second := e.start("detector")
	for i := range 30 {
		check(t, limiter, scanner, fmt.Sprintf("/api/b/%d", i))
	}
	testkit.WaitFor(t, 30*time.Second, "the scan to be banned after the restart", func() bool {
		return check(t, limiter, scanner, "/api/c").Reason == event.ReasonBanned
	})
	second.stop(syscall.SIGTERM)

	total := kafkatest.CountMessages(t, e.broker.Brokers(), decisionsTopic)
	replay := e.start("detector", "DETECTOR_GROUP_ID", "replay-"+fmt.Sprint(time.Now().UnixNano()))
	waitConsuming(t, replay, float64(total))
	if n := kafkatest.CountMessages(t, e.broker.Brokers(), bansTopic); n != 1 {
		t.Fatalf("%d messages on the ban topic after a restart and a full replay, want exactly 1", n)
	}
	if b := bans(t, e, 1)[0]; b.Subject != scanner || b.Reason != "scan" {
		t.Fatalf("ban %+v", b)
	}
}

// admin sends an admin API request with token (none when empty) and the
// header name/value pairs, and returns the status and body.
func admin(t *testing.T, limiter *proc, method, path, token, body string, header ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+limiter.addr+path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

// Manual ban and unban through the admin API: enforced by every limiter
// instance, and both announced on the ban topic.
func TestAdminBanAndUnban(t *testing.T) {
	e := newEnv(t)
	a := e.start("limiter")
	b := e.start("limiter")
	const ip = "198.51.100.77"
	for _, tok := range []string{"", "wrong"} {
		if code, _ := admin(t, a, "GET", "/v1/admin/bans", tok, ""); code != http.StatusUnauthorized {
			t.Fatalf("token %q: status %d, want 401", tok, code)
		}
	}
	if code, body := admin(t, a, "POST", "/v1/admin/bans", adminToken, `{"scope":"ip","subject":"`+ip+`","duration":"1h","reason":"incident 42"}`,
		"X-Actor", "ana"); code != http.StatusCreated {
		t.Fatalf("ban: %d %s", code, body)
	}
	if d := check(t, a, ip, "/api/x"); d.Allowed || d.Reason != event.ReasonBanned {
		t.Fatalf("instance a after the ban: %+v", d)
	}
	testkit.WaitFor(t, time.Second, "the other instance to enforce the ban", func() bool {
		return check(t, b, ip, "/api/x").Reason == event.ReasonBanned
	})
	if code, body := admin(t, a, "GET", "/v1/admin/bans", adminToken, ""); code != 200 || !strings.Contains(body, ip) {
		t.Fatalf("list: %d %s", code, body)
	}
	if code, body := admin(t, a, "POST", "/v1/admin/bans", adminToken, `{"scope":"planet","subject":"x","duration":"1h"}`); code != http.StatusBadRequest {
		t.Fatalf("bad scope: %d %s", code, body)
	}
	if code, body := admin(t, b, "DELETE", "/v1/admin/bans/ip/"+ip+"?reason=false+positive", adminToken, "", "X-Actor", "bo"); code != http.StatusOK {
		t.Fatalf("unban: %d %s", code, body)
	}
	testkit.WaitFor(t, time.Second, "both instances to lift the ban", func() bool {
		return check(t, a, ip, "/api/x").Allowed && check(t, b, ip, "/api/x").Allowed
	})
	if code, _ := admin(t, b, "DELETE", "/v1/admin/bans/ip/"+ip, adminToken, ""); code != http.StatusNotFound {
		t.Fatalf("second unban: %d, want 404", code)
	}
	got := bans(t, e, 2)
	if got[0].Action != event.ActionBan || got[0].Source != "admin" || got[0].Reason != "manual" || got[0].Note != "incident 42" ||
		got[0].Actor != "ana" || got[1].Action != event.ActionUnban || got[1].Subject != ip || got[1].Note != "false positive" ||
		got[1].Actor != "bo" {
		t.Fatalf("ban topic: %+v", got)
	}
}
