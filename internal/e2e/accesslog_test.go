package e2e

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/abuse"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/gatewaytest"
	"github.com/ratewarden/ratewarden/internal/testkit/kafkatest"
)

// The access-log recipe's files.
const (
	accessLogConf    = "../../deploy/gateways/nginx/access-log.conf"
	accessLogShipper = "../../deploy/gateways/nginx/ship-access-log.sh"
	accessLogTopic   = "gateway.access"
)

const accessLogRules = `
rules:
  - id: api-per-ip
    match: {endpoints: ["/**"]}
    key: [ip]
    algorithm: token_bucket
    limits: [{rate: 100, per: 1s, burst: 100}]
detection:
  probing: {distinct_endpoints: 5, within: 1m, duration: 1h}
  brute_force: {failures: 8, within: 5m, duration: 1h}
`

// The whole gateway recipe with outcomes from its access log: nginx in
// front of an application, asking the limiter (auth_request) and logging
// JSON lines (access-log.conf) that ship-access-log.sh sends to Kafka, as
// they are in deploy/gateways/nginx; the detector reads them
// (ACCESS_LOG_TOPIC). A client probing 8 missing paths is banned for
// probing and refused by nginx from then on; the refusals nginx logs (403)
// are the ban's own and never feed a brute-force ban; a normal client with
// one missing page is never banned. The broker is devkafka, as `make run`
// starts it with ACCESS_LOG_TOPIC set for the whole stack: it creates the
// topic, which nothing else does (kcat -P would wait for it, and the
// detector warn).
func TestAccessLogOutcomes(t *testing.T) {
	bin := nginxBinary(t)
	broker := launch(t, "devkafka", map[string]string{"ACCESS_LOG_TOPIC": accessLogTopic, "DEVKAFKA_PARTITIONS": "3"})
	testkit.WaitFor(t, 15*time.Second, "devkafka to be ready", func() bool { return strings.Contains(broker.out.String(), "devkafka ready") })
	e := newEnvOn(t, accessLogRules, broker.addr)
	const token = "nginx-api-token-0123456789abcdef"
	lim := e.start("limiter", "TRUSTED_PROXIES", "127.0.0.1", "AUTH_DENY_STATUS", "401", "API_TOKENS", token)
	det := e.start("detector", "ACCESS_LOG_TOPIC", accessLogTopic)
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/known" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintln(w, "ok")
	}))
	defer app.Close()

	dir := t.TempDir()
	logPath := filepath.Join(dir, "access.json")
	gatewaytest.Ship(t, accessLogShipper, broker.addr, accessLogTopic, logPath)
	n := nginxWithAccessLog(t, bin, lim.addr, strings.TrimPrefix(app.URL, "http://"), token, logPath)
	client := &http.Client{Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	get := func(ip, path string) int {
		return nginxGet(t, client, n, path, "X-Forwarded-For", ip).status
	}
	// kcat reads its input a kilobyte at a time: a long line pushes the
	// lines before it out.
	flush := func() {
		for range 3 {
			get("192.0.2.250", "/api/known?pad="+strings.Repeat("x", 2048))
		}
	}
	const prober, normal = "203.0.113.66", "198.51.100.7"
	for i := range 8 {
		if s := get(prober, fmt.Sprintf("/api/p/%d", i)); s != http.StatusNotFound {
			t.Fatalf("probe %d: %d, want 404 from the application", i, s)
		}
		if s := get(normal, "/api/known"); s != http.StatusOK {
			t.Fatalf("normal client: %d", s)
		}
	}
	get(normal, "/api/missing")
	flush()
	ban := bans(t, e, 1)[0]
	if ban.Reason != abuse.ReasonProbing || ban.Subject != prober || len(ban.Evidence.SampleEndpoints) == 0 {
		t.Fatalf("ban %+v, want the prober's for probing", ban)
	}
	testkit.WaitFor(t, 10*time.Second, "nginx to refuse the banned prober", func() bool { return get(prober, "/api/known") == http.StatusForbidden })
	skipped := det.metric(t, "rate_limit_detector_skipped_events_total", `source="access_log"`)
	for range 10 { // refused by the ban: logged as 403s
		if s := get(prober, "/api/known"); s != http.StatusForbidden {
			t.Fatalf("banned prober: %d, want 403", s)
		}
	}
	flush()
	testkit.WaitFor(t, 20*time.Second, "the detector to skip the ban's own refusals", func() bool {
		return det.metric(t, "rate_limit_detector_skipped_events_total", `source="access_log"`) >= skipped+10
	})
	if n := kafkatest.CountMessages(t, e.brokers(), bansTopic); n != 1 {
		t.Fatalf("%d messages on the ban topic, want the probing ban alone", n)
	}
	if d := check(t, lim, normal, "/api/known"); d.Reason == event.ReasonBanned {
		t.Fatal("the normal client is banned")
	}
}

// A detector started before its access-log topic exists warns, naming the
// topic, while it waits, and consumes the topic once it is created (a group
// reader that joined without the topic would never get its partitions).
func TestDetectorWaitsForItsTopic(t *testing.T) {
	e := newEnvWith(t, accessLogRules)
	det := e.start("detector", "ACCESS_LOG_TOPIC", accessLogTopic)
	warning := regexp.MustCompile(`"level":"warn"[^\n]*"msg":"topic does not exist[^"]*"[^\n]*"topic":"` + regexp.QuoteMeta(accessLogTopic) + `"`)
	testkit.WaitFor(t, 15*time.Second, "a warning naming the missing topic", func() bool { return warning.MatchString(det.out.String()) })
	if err := e.broker.Cluster().CreateTopic(accessLogTopic, 3, nil); err != nil {
		t.Fatal(err)
	}
	line := []byte(`{"remote_addr":"203.0.113.5","request_uri":"/api/p","request_method":"GET","status":404,"msec":"` +
		strconv.FormatFloat(float64(time.Now().UnixMilli())/1000, 'f', 3, 64) + `"}`)
	produce(t, e, accessLogTopic, line)
	testkit.WaitFor(t, 30*time.Second, "the detector to consume the topic", func() bool {
		return det.metric(t, "rate_limit_detector_events_total", `source="access_log"`) >= 1
	})
}

// nginxWithAccessLog is nginxStart with the access-log recipe included,
// logging to logPath, and the client address taken from X-Forwarded-For
// when the peer is 127.0.0.1 (the test's clients all connect from there).
func nginxWithAccessLog(t *testing.T, bin, limiterAddr, appAddr, token, logPath string) *nginxProc {
	t.Helper()
	recipe, err := os.ReadFile(accessLogConf)
	if err != nil {
		t.Fatal(err)
	}
	const logLine = "access_log /var/log/nginx/ratewarden.json ratewarden;"
	if c := strings.Count(string(recipe), logLine); c != 1 {
		t.Fatalf("%s: %q appears %d times, want once", accessLogConf, logLine, c)
	}
	conf := strings.Replace(string(recipe), logLine, "access_log "+logPath+" ratewarden;", 1) +
		"\nset_real_ip_from 127.0.0.1;\nreal_ip_header X-Forwarded-For;\n"
	extra := filepath.Join(t.TempDir(), "access-log.conf")
	if err := os.WriteFile(extra, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	return nginxStartWith(t, bin, limiterAddr, appAddr, token, extra)
}
