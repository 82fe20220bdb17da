package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/kafkatest"
	"github.com/ratewarden/ratewarden/internal/testkit/pgtest"
	"github.com/ratewarden/ratewarden/internal/testkit/proctest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// The whole process: configuration from the environment, the example rules,
// a decision over HTTP, envoyproxy/ratelimit's POST /json on the same port,
// their events on the topic, and a clean stop.
func TestRunServesAndStopsCleanly(t *testing.T) {
	testkit.AvoidHourEnd(t) // /json's second call must find the first counted
	broker := kafkatest.StartBroker(t, "ratelimit.decisions")
	prefix := redistest.Prefix(t, redistest.Client(t))
	addr := proctest.FreeAddr(t)
	rls := t.TempDir()
	if err := os.WriteFile(filepath.Join(rls, "edge.yaml"), []byte("domain: edge\ndescriptors:\n"+
		"  - key: remote_address\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"RLS_CONFIG_DIR":   rls,
		"LISTEN_ADDR":      addr,
		"GRPC_LISTEN_ADDR": "127.0.0.1:0",
		"KAFKA_BROKERS":    broker.Addr(),
		"REDIS_URL":        redistest.RequiredURL(t),
		"REDIS_KEY_PREFIX": prefix,
		"RULES_FILE":       "../../deploy/rules.example.yaml",
		"DATABASE_URL":     pgtest.Database(t),
		"INSTANCE_ID":      "run-test",
		"LOG_LEVEL":        "info",
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	var logs proctest.Output
	go func() { done <- run(ctx, nil, func(k string) string { return env[k] }, &logs) }()

	base := "http://" + addr
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("limiter not ready: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	resp, err := http.Post(base+"/v1/check", "application/json",
		strings.NewReader(`{"ip":"203.0.113.7","endpoint":"/api/login","method":"POST"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"rule_id":"login-per-ip"`) || !strings.Contains(string(body), `"allowed":true`) {
		t.Fatalf("check: %d %s", resp.StatusCode, body)
	}
	if resp.Header.Get("RateLimit-Policy") == "" {
		t.Fatalf("missing RateLimit-Policy header: %v", resp.Header)
	}
	// POST /json: the first call within the limit, the second over it.
	for i, want := range []struct {
		status  int
		overall string
	}{{http.StatusOK, `"overallCode":"OK"`}, {http.StatusTooManyRequests, `"overallCode":"OVER_LIMIT"`}} {
		resp, err := http.Post(base+"/json", "application/json",
			strings.NewReader(`{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"198.51.100.9"}]}]}`))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if compact := strings.ReplaceAll(string(body), " ", ""); resp.StatusCode != want.status || !strings.Contains(compact, want.overall) ||
			resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("/json call %d: %d %s %v, want %d with %s", i+1, resp.StatusCode, body, resp.Header, want.status, want.overall)
		}
	}
	metrics, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	mbody, _ := io.ReadAll(metrics.Body)
	metrics.Body.Close()
	if !strings.Contains(string(mbody), `rate_limit_requests_total{result="ok",rule="login-per-ip",shadow="false",tier="none"} 1`) {
		t.Fatalf("metrics lack the decision:\n%s", mbody)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run returned %v after cancel, want nil", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("run did not stop within 15s")
	}
	// Every line names the service, the shutdown's included: beside the
	// detector's and the archiver's, a line must say whose it is.
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	for _, line := range lines {
		var fields map[string]any
		if err := json.Unmarshal([]byte(line), &fields); err != nil || fields["service"] != "limiter" {
			t.Errorf("log line without service limiter: %s", line)
		}
	}
	if last := lines[len(lines)-1]; !strings.Contains(last, `"msg":"stopped"`) {
		t.Errorf("last log line %s, want the shutdown's stopped", last)
	}
	msgs := kafkatest.ReadMessages(t, broker.Brokers(), "ratelimit.decisions", 3, 10*time.Second)
	byIP := map[string][]bool{} // the verdicts of each client address
	for _, m := range msgs {
		ev, err := event.DecodeDecision(m.Value)
		if err != nil || ev.Instance != "run-test" {
			t.Fatalf("event %+v, %v", ev, err)
		}
		if ev.IP == "203.0.113.7" && ev.RuleID != "login-per-ip" {
			t.Fatalf("check event %+v, want rule login-per-ip", ev)
		}
		byIP[ev.IP] = append(byIP[ev.IP], ev.Allowed)
	}
	if got := byIP["198.51.100.9"]; len(got) != 2 || !got[0] || got[1] || len(byIP["203.0.113.7"]) != 1 {
		t.Fatalf("events by address %v: want the check, and the /json calls allowed then denied", byIP)
	}
}

func TestRunRefusesBadConfiguration(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"bad duration", map[string]string{"REDIS_TIMEOUT": "soon"}, "REDIS_TIMEOUT"},
		{"missing rules file", map[string]string{"RULES_FILE": "/nonexistent/rules.yaml"}, "RULES_FILE"},
		{"bad redis url", map[string]string{"RULES_FILE": "../../deploy/rules.example.yaml", "REDIS_URL": "http://x"}, "REDIS_URL"},
		// A misspelt key names the file, the line and the key meant.
		{"misspelt key in the rules file", map[string]string{"RULES_FILE": rulesMisspeltPath},
			"RULES_FILE " + rulesMisspeltPath + `: rule "login": line 5: unknown key "algoritm" (did you mean "algorithm"?)`},
		{"misspelt key in an RLS config file", map[string]string{"RULES_FILE": "../../deploy/rules.example.yaml", "RLS_CONFIG_DIR": rlsMisspeltDir},
			"RLS_CONFIG_DIR " + rlsMisspeltDir + `: config.yaml: domain messaging: descriptor to_number: line 5: unknown key "shadow_mod" (did you mean "shadow_mode"?)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := run(context.Background(), nil, func(k string) string { return tt.env[k] }, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error naming %s", err, tt.want)
			}
		})
	}
}
