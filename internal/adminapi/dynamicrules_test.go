package adminapi_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/adminapi"
	"github.com/ratewarden/ratewarden/internal/bearer"
	"github.com/ratewarden/ratewarden/internal/limiter"
	"github.com/ratewarden/ratewarden/internal/pgrules"
	"github.com/ratewarden/ratewarden/internal/pgstore"
	"github.com/ratewarden/ratewarden/internal/redisfleet"
	"github.com/ratewarden/ratewarden/internal/redisstore"
	"github.com/ratewarden/ratewarden/internal/rules"
	"github.com/ratewarden/ratewarden/internal/rulesync"
	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/limitertest"
	"github.com/ratewarden/ratewarden/internal/testkit/pgtest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

const adminRulesYAML = `
rules:
  - id: login
    match: {endpoints: ["/login"]}
    key: [ip]
    algorithm: fixed_window
    limits: [{requests: 5, per: 1h}] # an hour, and the tests that count start away from its end
`

// ruleStack is the admin API with dynamic rules, as the limiter serves it:
// the rules manager over a database of its own and the rule-change
// notices on the real Redis, applying the rules to a limiter that decides
// on that Redis.
type ruleStack struct {
	t   *testing.T
	url string
	db  string
	svc *limiter.Service
	reg *prometheus.Registry
}

func newRuleStack(t *testing.T) *ruleStack {
	t.Helper()
	return newRuleStackOn(t, adminRulesYAML)
}

// newRuleStackOn is newRuleStack with rulesYAML as its rules file.
func newRuleStackOn(t *testing.T, rulesYAML string) *ruleStack {
	t.Helper()
	db := pgtest.Database(t)
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(rulesYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t, rdb)
	svc, reg := newLimiter(t, rdb, prefix, nil)
	mgr := rulesync.New(rulesync.Config{
		File:    path,
		Options: rules.Options{KeyPrefix: prefix},
		Apply:   svc.SetRules,
		Connect: func(ctx context.Context) (rulesync.Store, error) {
			st, err := pgstore.OpenMigrated(ctx, db, nil)
			if err != nil {
				return nil, err
			}
			return pgrules.New(st), nil
		},
		Changes:    redisfleet.NewRuleChanges(rdb, prefix),
		Registerer: prometheus.NewRegistry(),
		Log:        zap.NewNop(),
	})
	if err := mgr.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	hb := redisfleet.NewHeartbeats(rdb, prefix, "l1", time.Second)
	if _, err := hb.Beat(context.Background(), time.Now()); err != nil {
		t.Fatal(err)
	}
	log := zap.NewNop()
	admin := adminapi.New(adminapi.Config{
		Gate:     bearer.NewGate("admin", "ratewarden admin", []string{"tok"}, log, prometheus.NewRegistry()),
		Rules:    mgr,
		Instance: "l1",
		Instances: func(ctx context.Context, now time.Time) ([]adminapi.LiveInstance, error) {
			list, err := hb.Instances(ctx, now)
			out := make([]adminapi.LiveInstance, len(list))
			for i, in := range list {
				out[i] = adminapi.LiveInstance{ID: in.ID, LastSeen: in.LastSeen, RulesVersion: in.Rules.Version, RulesAppliedAt: in.Rules.AppliedAt}
			}
			return out, err
		},
		Log: log,
	})
	srv := httptest.NewServer(admin)
	t.Cleanup(srv.Close)
	return &ruleStack{t: t, url: srv.URL, db: db, svc: svc, reg: reg}
}

// newLimiter is a limiter deciding on rdb under prefix, with the rules
// file's rules until a rules manager applies its own, enforcing bans (when
// not nil), and publishing no events (these tests read none).
func newLimiter(t *testing.T, rdb *redis.Client, prefix string, bans *limiter.BanSet) (*limiter.Service, *prometheus.Registry) {
	t.Helper()
	file, err := rules.Parse([]byte(adminRulesYAML))
	if err != nil {
		t.Fatal(err)
	}
	set, err := rules.Compile(file, rules.Options{KeyPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	svc := limitertest.Service(t, redisstore.New(rdb), set, limitertest.Options{
		Limiter:    limiter.Config{Instance: "l1", Bans: bans},
		Coalesce:   redisstore.CoalesceConfig{Timeout: 5 * time.Second},
		Registerer: reg,
	})
	return svc, reg
}

// check decides login's request, as POST /v1/check decides
// {"ip": "198.51.100.7", "endpoint": "/login"}.
func (s *ruleStack) check() *limiter.Decision {
	s.t.Helper()
	return decide(s.svc, rules.Request{IP: loginIP, Endpoint: "/login"})
}

// decide decides req, completed as POST /v1/check completes a request
// (the method GET, the cost 1, the address parsed).
func decide(svc *limiter.Service, req rules.Request) *limiter.Decision {
	req.Addr = netip.MustParseAddr(req.IP)
	req.Method, req.Cost = http.MethodGet, 1
	d := new(limiter.Decision)
	svc.Check(context.Background(), &req, d)
	return d
}

// do sends an admin request with header's pairs set and returns the
// status and the decoded JSON body.
func (s *ruleStack) do(method, path, body string, header ...string) (int, map[string]any) {
	s.t.Helper()
	req, _ := http.NewRequest(method, s.url+path, strings.NewReader(body))
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		s.t.Fatalf("%s %s: %d %q", method, path, resp.StatusCode, raw)
	}
	return resp.StatusCode, out
}

// admin sends an authorized admin request (do with the admin token).
func (s *ruleStack) admin(method, path, body string, header ...string) (int, map[string]any) {
	s.t.Helper()
	return s.do(method, path, body, append([]string{"Authorization", "Bearer tok"}, header...)...)
}

const loginIP = "198.51.100.7"

func loginRule(algorithm string, requests int) string {
	return `{"id": "login", "match": {"endpoints": ["/login"]}, "key": ["ip"], "algorithm": "` + algorithm +
		`", "limits": [{"requests": ` + itoa(requests) + `, "per": "1h"}]}`
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// Raising a limit keeps the window's count (same key, same algorithm);
// changing the algorithm starts the rule fresh. Each change is answered
// with its version and leaves an audit row naming the actor.
func TestAdminRuleEditKeepsOrResetsCounters(t *testing.T) {
	testkit.AvoidHourEnd(t)
	s := newRuleStack(t)
	for i := range 5 {
		if r := s.check(); !r.Allowed {
			t.Fatalf("request %d denied under the file's limit of 5", i+1)
		}
	}
	if r := s.check(); r.Allowed {
		t.Fatal("6th request allowed under a limit of 5")
	}

	status, body := s.admin(http.MethodPut, "/v1/admin/rules/login", loginRule("fixed_window", 10), "X-Actor", "alice")
	if status != http.StatusCreated || body["dynamic_version"] != 1.0 || body["action"] != "put" || body["announced"] != true {
		t.Fatalf("PUT: %d %v", status, body)
	}
	r := s.check()
	if !r.Allowed || r.Limit != 10 || r.Remaining != 4 {
		t.Fatalf("after raising to 10: allowed %v, limit %d, remaining %d; want allowed, 10, 4 (the window's 5 kept)",
			r.Allowed, r.Limit, r.Remaining)
	}

	status, body = s.admin(http.MethodPut, "/v1/admin/rules/login", loginRule("sliding_window", 10))
	if status != http.StatusOK || body["before"] == nil {
		t.Fatalf("second PUT: %d %v", status, body)
	}
	if r := s.check(); !r.Allowed || r.Remaining != 9 {
		t.Fatalf("after the algorithm change: allowed %v, remaining %d; want a fresh window (9)", r.Allowed, r.Remaining)
	}

	conn, err := pgx.Connect(context.Background(), s.db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var actor, instance, source, algBefore, algAfter string
	err = conn.QueryRow(context.Background(), `SELECT actor, instance, source_addr, before->>'algorithm', after->>'algorithm'
		FROM rule_changes WHERE version = 2`).Scan(&actor, &instance, &source, &algBefore, &algAfter)
	if err != nil {
		t.Fatal(err)
	}
	if actor != "admin" || instance != "l1" || source != "127.0.0.1" || algBefore != "fixed_window" || algAfter != "sliding_window" {
		t.Fatalf("audit row: actor %q instance %q source %q before %q after %q", actor, instance, source, algBefore, algAfter)
	}
	var firstActor string
	if err := conn.QueryRow(context.Background(), "SELECT actor FROM rule_changes WHERE version = 1").Scan(&firstActor); err != nil || firstActor != "alice" {
		t.Fatalf("first change's actor %q, %v; want alice (X-Actor)", firstActor, err)
	}
}

// GET shows each rule with its source and version, the merged version, and
// the live instances with theirs.
func TestAdminRulesList(t *testing.T) {
	s := newRuleStack(t)
	if status, _ := s.admin(http.MethodPut, "/v1/admin/rules/extra",
		`{"id": "extra", "key": ["ip"], "algorithm": "token_bucket", "limits": [{"rate": 1, "per": "1s", "burst": 5}]}`); status != http.StatusCreated {
		t.Fatalf("PUT extra: %d", status)
	}
	status, body := s.admin(http.MethodGet, "/v1/admin/rules", "")
	if status != http.StatusOK {
		t.Fatalf("GET: %d %v", status, body)
	}
	version, _ := body["version"].(string)
	if !strings.HasPrefix(version, "1-") || body["dynamic_version"] != 1.0 || body["instance"] != "l1" {
		t.Fatalf("GET: %v", body)
	}
	list, _ := body["rules"].([]any)
	sources := map[string]string{}
	for _, x := range list {
		r := x.(map[string]any)
		sources[r["id"].(string)] = r["source"].(string)
		if r["id"] == "extra" && (r["version"] != 1.0 || r["rule"].(map[string]any)["algorithm"] != "token_bucket") {
			t.Fatalf("extra: %v", r)
		}
	}
	if sources["login"] != "file" || sources["extra"] != "dynamic" || len(sources) != 2 {
		t.Fatalf("sources %v", sources)
	}
	// Durations read as the rules file writes them: 1h, not 1h0m0s.
	for _, x := range list {
		r := x.(map[string]any)
		per := r["rule"].(map[string]any)["limits"].([]any)[0].(map[string]any)["per"]
		if want := map[any]string{"login": "1h", "extra": "1s"}[r["id"]]; per != want {
			t.Errorf("%s: per %v, want %q", r["id"], per, want)
		}
	}
	instances, _ := body["instances"].([]any)
	if len(instances) != 1 || instances[0].(map[string]any)["instance"] != "l1" {
		t.Fatalf("instances %v", body["instances"])
	}
}

// Invalid changes answer 400 with the field at fault, unknown rules 404,
// and none of them changes the rules in force; the admin token is required.
func TestAdminRuleRefusals(t *testing.T) {
	s := newRuleStack(t)
	cases := []struct {
		name, method, path, body string
		status                   int
		field                    string
		errorHas                 string // the error names it; empty: not checked
	}{
		{"zero limit", http.MethodPut, "/v1/admin/rules/login", loginRule("fixed_window", 0), 400, "limits[0].requests", ""},
		{"unknown algorithm", http.MethodPut, "/v1/admin/rules/login", loginRule("leaky_bucket", 5), 400, "algorithm", ""},
		{"id differs from path", http.MethodPut, "/v1/admin/rules/other", loginRule("fixed_window", 5), 400, "id", ""},
		{"unknown key", http.MethodPut, "/v1/admin/rules/login", strings.Replace(loginRule("fixed_window", 5), "{", `{"colour": "red", `, 1), 400, "colour", ""},
		{"misspelt field", http.MethodPut, "/v1/admin/rules/login", `{"id": "login", "algoritm": "fixed_window"}`, 400, "algoritm",
			`unknown field (did you mean "algorithm"?)`},
		{"not JSON", http.MethodPut, "/v1/admin/rules/login", `{"id": `, 400, "", ""},
		{"delete of a file rule", http.MethodDelete, "/v1/admin/rules/login", "", 404, "", ""},
		{"delete of no rule", http.MethodDelete, "/v1/admin/rules/nope", "", 404, "", ""},
		{"shadow of no rule", http.MethodPut, "/v1/admin/rules/nope/shadow", `{"shadow": true}`, 404, "", ""},
		{"shadow without value", http.MethodPut, "/v1/admin/rules/login/shadow", `{}`, 400, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, body := s.admin(tc.method, tc.path, tc.body)
			if status != tc.status || body["error"] == nil {
				t.Fatalf("%d %v; want %d with an error", status, body, tc.status)
			}
			if msg, _ := body["error"].(string); !strings.Contains(msg, tc.errorHas) {
				t.Errorf("error %q; want it to name %s", msg, tc.errorHas)
			}
			if tc.field != "" {
				fields, _ := body["fields"].([]any)
				if len(fields) == 0 || fields[0].(map[string]any)["field"] != tc.field {
					t.Fatalf("fields %v; want %s first", body["fields"], tc.field)
				}
			}
		})
	}
	if status, _ := s.do(http.MethodGet, "/v1/admin/rules", ""); status != http.StatusUnauthorized {
		t.Fatalf("GET without token: %d", status)
	}
	_, body := s.admin(http.MethodGet, "/v1/admin/rules", "")
	if body["dynamic_version"] != 0.0 {
		t.Fatalf("refused changes moved the dynamic version: %v", body["dynamic_version"])
	}
	if r := s.check(); r.Limit != 5 {
		t.Fatalf("limit in force %d; want the file's 5", r.Limit)
	}
}

// A delete whose result does not compile with the rules file answers 400
// naming the problem and changes nothing, as an invalid PUT does: deleting
// an override puts the file's rule back, and here that rule's descriptor
// is the one of another dynamic rule, so every limiter would refuse the
// version the delete makes.
func TestAdminRuleDeleteThatBringsBackAConflictIsRefused(t *testing.T) {
	s := newRuleStackOn(t, adminRulesYAML+`
  - id: legacy-key
    descriptor: {domain: edge, entries: [{key: api_key}]}
    algorithm: fixed_window
    limits: [{requests: 1000, per: 1h}]
`)
	moved := `{"id": "legacy-key", "descriptor": {"domain": "old", "entries": [{"key": "api_key"}]},
		"algorithm": "fixed_window", "limits": [{"requests": 1000, "per": "1h"}]}`
	if status, body := s.admin(http.MethodPut, "/v1/admin/rules/legacy-key", moved); status != http.StatusCreated {
		t.Fatalf("PUT legacy-key override: %d %v", status, body)
	}
	apiKey := `{"id": "api-key", "descriptor": {"domain": "edge", "entries": [{"key": "api_key"}]},
		"algorithm": "sliding_window", "limits": [{"requests": 2, "per": "1h"}]}`
	if status, body := s.admin(http.MethodPut, "/v1/admin/rules/api-key", apiKey); status != http.StatusCreated {
		t.Fatalf("PUT api-key: %d %v", status, body)
	}
	_, before := s.admin(http.MethodGet, "/v1/admin/rules", "")
	status, body := s.admin(http.MethodDelete, "/v1/admin/rules/legacy-key", "")
	msg, _ := body["error"].(string)
	if status != http.StatusBadRequest || !strings.Contains(msg, "duplicate descriptor") || !strings.Contains(msg, "legacy-key") {
		t.Fatalf("DELETE legacy-key: %d %v; want 400 naming the duplicate descriptor", status, body)
	}
	if fields, _ := body["fields"].([]any); len(fields) == 0 || fields[0].(map[string]any)["field"] != "descriptor" {
		t.Errorf("fields %v; want descriptor first", body["fields"])
	}
	_, after := s.admin(http.MethodGet, "/v1/admin/rules", "")
	if after["dynamic_version"] != before["dynamic_version"] || after["version"] != before["version"] {
		t.Errorf("a refused delete moved the rules: version %v, dynamic %v; were %v, %v",
			after["version"], after["dynamic_version"], before["version"], before["dynamic_version"])
	}
}

// A rule switched to shadow through the API reports but never denies; its
// decisions say shadow=true in the answer and the metrics.
func TestAdminShadowSwitch(t *testing.T) {
	testkit.AvoidHourEnd(t)
	s := newRuleStack(t)
	if status, body := s.admin(http.MethodPut, "/v1/admin/rules/login/shadow", `{"shadow": true}`); status != http.StatusCreated {
		t.Fatalf("shadow on: %d %v", status, body)
	}
	for range 7 {
		if r := s.check(); !r.Allowed {
			t.Fatal("a shadow rule denied")
		}
	}
	r := s.check()
	if !r.Shadow || r.Reason != "rate_limited" {
		t.Fatalf("over the limit in shadow: %+v; want rate_limited with shadow", r)
	}
	if got := testkit.MetricSum(t, s.reg, "rate_limit_requests_total", map[string]string{"rule": "login", "shadow": "true", "result": "rate_limited"}); got != 3 {
		t.Fatalf("shadow denials in metrics = %v; want 3", got)
	}
	if status, _ := s.admin(http.MethodPut, "/v1/admin/rules/login/shadow", `{"shadow": false}`); status != http.StatusOK {
		t.Fatalf("shadow off: %d", status)
	}
	if r := s.check(); r.Allowed {
		t.Fatal("the rule out of shadow mode still allows over its limit")
	}
}
