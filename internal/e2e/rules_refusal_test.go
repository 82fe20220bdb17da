package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratewarden/ratewarden/internal/testkit"
)

// legacyKeyYAML is the rules file before a deploy: dynamicRulesYAML and a
// descriptor rule on edge's api_key that the deploy removes.
const legacyKeyYAML = dynamicRulesYAML + `
  - id: legacy-key
    descriptor: {domain: edge, entries: [{key: api_key}]}
    algorithm: fixed_window
    limits: [{requests: 1000, per: 1h}]
`

// apiKeyRule is a dynamic rule written against the file after the deploy
// (dynamicRulesYAML): on legacy-key's descriptor, so the two conflict.
const apiKeyRule = `{"id": "api-key", "descriptor": {"domain": "edge", "entries": [{"key": "api_key"}]},
	"algorithm": "sliding_window", "limits": [{"requests": 2, "per": "1h"}]}`

// A rolling deploy: a limiter of the new rules file stores a dynamic rule
// that fits its file; an old limiter restarting with the old file, which
// conflicts with that rule, starts on its file's rules (not exit status 1,
// a crash loop), shows the refusal in /readyz and GET /v1/admin/rules,
// refuses changes (validated with its file against the stored set, which
// that file does not fit: stored, they could undo changes it never ran or
// make a set no limiter accepts), and once its file is replaced by the new
// one runs the dynamic rules within a poll, without any admin change, and
// takes changes again.
func TestLimiterStartsOnItsFileWhenDynamicRulesConflict(t *testing.T) {
	e := newEnv(t)
	fresh := e.start("limiter", "INSTANCE_ID", "new", "RULES_FILE", writeRules(t, dynamicRulesYAML))
	if status, body := admin(t, fresh, http.MethodPut, "/v1/admin/rules/api-key", adminToken, apiKeyRule); status != http.StatusCreated {
		t.Fatalf("PUT on the new limiter: %d %s", status, body)
	}

	oldFile := writeRules(t, legacyKeyYAML)
	vars := map[string]string{"INSTANCE_ID": "old", "RULES_FILE": oldFile, "RULES_POLL_INTERVAL": "200ms"}
	for k, v := range e.vars {
		if _, set := vars[k]; !set {
			vars[k] = v
		}
	}
	old := launch(t, "limiter", vars)
	if err := old.await("/readyz", 15*time.Second); err != nil {
		select {
		case <-old.done:
			t.Fatalf("the limiter exited with status %d: %v", old.cmd.ProcessState.ExitCode(), err)
		default:
			t.Fatal(err)
		}
	}

	// It runs its file's rules: legacy-key, not api-key.
	client := rlsClient(t, old)
	if got := apiKeyLimit(t, client); got != 1000 {
		t.Fatalf("edge api_key limit %d on the old limiter; want its file's 1000", got)
	}
	status, ready := readyz(t, old)
	if status != http.StatusOK || !strings.Contains(ready, `"status":"ready"`) ||
		!strings.Contains(ready, `"dynamic_rules":"refused version 1"`) {
		t.Fatalf("/readyz %d %s; want ready with dynamic_rules refused version 1", status, ready)
	}
	view := rulesView(t, old)
	if r := view.DynamicRefused; view.DynamicVersion != 0 || r == nil || r.Version != 1 ||
		!slices.Equal(r.Rules, []string{"api-key"}) || !strings.Contains(r.Error, "duplicate descriptor") {
		t.Fatalf("GET /v1/admin/rules: dynamic_version %d, dynamic_refused %+v; want 0 and version 1 refused for api-key",
			view.DynamicVersion, r)
	}
	if n := old.metric(t, `rate_limit_rules_reloads_total{result="failure",source="dynamic"}`); n != 1 {
		t.Fatalf("dynamic refusals counted: %v, want 1", n)
	}

	// A change made on it is refused, naming the conflict; nothing is
	// stored.
	signup := strings.NewReplacer("login", "signup", `"requests": 3`, `"requests": 30`).Replace(loginAt3)
	status, body := admin(t, old, http.MethodPut, "/v1/admin/rules/signup", adminToken, signup)
	if status != http.StatusBadRequest || !strings.Contains(body, "duplicate descriptor") {
		t.Fatalf("PUT on the old limiter: %d %s; want 400 naming the duplicate descriptor", status, body)
	}
	if v := rulesView(t, fresh); v.DynamicVersion != 1 {
		t.Fatalf("after the refused PUT the store is at version %d, want 1", v.DynamicVersion)
	}

	// The deploy reaches it: its file becomes the new one.
	rewrite(t, oldFile, legacyKeyYAML, dynamicRulesYAML)
	testkit.WaitFor(t, 5*time.Second, "the dynamic rule in force on the old limiter", func() bool { return apiKeyLimit(t, client) == 2 })
	view = rulesView(t, old)
	if view.DynamicVersion != 1 || view.DynamicRefused != nil {
		t.Fatalf("GET /v1/admin/rules after the new file: dynamic_version %d, dynamic_refused %+v; want 1 and none",
			view.DynamicVersion, view.DynamicRefused)
	}
	if status, body := admin(t, old, http.MethodPut, "/v1/admin/rules/signup", adminToken, signup); status != http.StatusCreated {
		t.Fatalf("PUT on the old limiter with the new file: %d %s; want 201", status, body)
	}
	if _, ready := readyz(t, old); !strings.Contains(ready, `"dynamic_rules":"ok"`) {
		t.Fatalf("/readyz %s after the new file; want dynamic_rules ok", ready)
	}
}

// apiKeyLimit is the limit in force for edge's api_key on the limiter of
// client (reported over the limit too), or -1 when no rule matches.
func apiKeyLimit(t *testing.T, client rlsv3.RateLimitServiceClient) int64 {
	t.Helper()
	resp, err := client.ShouldRateLimit(context.Background(), rlsRequest("edge", "api_key=k"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Statuses[0].CurrentLimit == nil {
		return -1
	}
	return int64(resp.Statuses[0].CurrentLimit.RequestsPerUnit)
}

// readyz returns the status and body of lim's /readyz.
func readyz(t *testing.T, lim *proc) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + lim.addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// adminRulesView is the part of GET /v1/admin/rules these tests read.
type adminRulesView struct {
	DynamicVersion int64 `json:"dynamic_version"`
	DynamicRefused *struct {
		Version int64    `json:"version"`
		Rules   []string `json:"rules"`
		Error   string   `json:"error"`
	} `json:"dynamic_refused"`
}

// rulesView reads GET /v1/admin/rules of lim.
func rulesView(t *testing.T, lim *proc) adminRulesView {
	t.Helper()
	status, body := admin(t, lim, http.MethodGet, "/v1/admin/rules", adminToken, "")
	var v adminRulesView
	if err := json.Unmarshal([]byte(body), &v); status != http.StatusOK || err != nil {
		t.Fatalf("GET /v1/admin/rules: %d %s (%v)", status, body, err)
	}
	return v
}
