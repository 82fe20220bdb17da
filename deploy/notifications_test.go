package deploy_test

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/kafkatest"
	"github.com/ratewarden/ratewarden/internal/testkit/proctest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// ntfDeadline bounds each wait of the notification test: a bound on a hang,
// never a measurement (scrapes, evaluations and Alertmanager's group waits
// are a second each here; a loaded machine may take many).
const ntfDeadline = 3 * time.Minute

// ntfFallbackAlert is the alert of a limiter deciding without Redis.
const ntfFallbackAlert = "RateLimiterNotInRedisMode"

// TestNotificationRedisFallback runs the shipped alerting path end to end
// with Debian's prometheus and prometheus-alertmanager: a limiter (built
// from cmd/limiter) on a private redis-server, Prometheus scraping it with
// deploy/prometheus/alerts.yml, Alertmanager with
// deploy/alertmanager/alertmanager.yml and its templates, and a webhook and
// a Slack endpoint served by the test. Redis stopped: the limiter falls back
// to local mode and the fallback alert reaches the webhook, with its
// severity, and Slack, through the templates. Redis back: a resolved
// notification follows.
//
// What the copies change, and nothing else: in the alert rules, the for:
// durations (2s, or 0s where shipped so; every expression is the shipped
// one); in prometheus.yml, the scrape and evaluation intervals (1s), the
// targets (the limiter, the Alertmanager) and the rule file's path; in
// alertmanager.yml, the group waits and intervals (1s), the templates'
// directory, the webhook's URL and the files the secrets are read from
// (written by the test), the Slack URL's file naming the test's endpoint,
// and no e-mail (no SMTP server here).
func TestNotificationRedisFallback(t *testing.T) {
	bins := ntfTools(t)
	sink := ntfStartSink(t)

	rds := redistest.StartServerAt(t, proctest.FreeAddr(t))
	broker := kafkatest.StartBroker(t, "ratelimit.decisions", "ratelimit.bans")
	rules, err := filepath.Abs("rules.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	limiter := startService(t, filepath.Join(proctest.Build(t, "../cmd/limiter"), "limiter"), []string{
		"REDIS_URL=redis://" + rds.Addr + "/0",
		"REDIS_CLUSTER_ADDRS=",
		"KAFKA_BROKERS=" + broker.Addr(),
		"RULES_FILE=" + rules,
		"DYNAMIC_RULES=false",
		"INSTANCE_ID=notify-1",
		"REDIS_HEALTH_INTERVAL=200ms",
		"REDIS_FAILED_CHECKS=2",
		"REDIS_RECOVER_AFTER=1s",
		"PERMISSIVE_AFTER=0",
		"LOG_FORMAT=json",
	})

	am := ntfStartAlertmanager(t, bins.alertmanager, sink)
	ntfStartPrometheus(t, bins.prometheus, limiter, am)

	rds.Kill()
	firing := sink.waitWebhook(t, "the fallback alert firing at the webhook", func(m ntfMessage, a ntfAlert) bool {
		return m.Status == "firing" && a.Status == "firing" && a.Labels["alertname"] == ntfFallbackAlert
	})
	if got := firing.alert.Labels["severity"]; got != "critical" {
		t.Errorf("%s reached the webhook with severity %q, want critical", ntfFallbackAlert, got)
	}
	if firing.msg.Receiver != "critical" {
		t.Errorf("%s went to receiver %q, want critical", ntfFallbackAlert, firing.msg.Receiver)
	}
	if got := firing.alert.Labels["instance"]; got != limiter {
		t.Errorf("%s names instance %q, want the limiter %s", ntfFallbackAlert, got, limiter)
	}
	if !strings.Contains(firing.alert.Annotations["summary"], "decides without Redis") {
		t.Errorf("%s summary %q", ntfFallbackAlert, firing.alert.Annotations["summary"])
	}
	sink.waitSlack(t, "the fallback alert in Slack, through the templates", func(s ntfSlack) bool {
		return s.has("[FIRING:1] CRITICAL "+ntfFallbackAlert, "danger", "decides without Redis")
	})

	redistest.StartServerAt(t, rds.Addr)
	sink.waitWebhook(t, "the fallback alert resolved at the webhook", func(m ntfMessage, a ntfAlert) bool {
		return a.Status == "resolved" && a.Labels["alertname"] == ntfFallbackAlert && a.Labels["severity"] == "critical"
	})
	sink.waitSlack(t, "the fallback alert resolved in Slack", func(s ntfSlack) bool {
		return s.has("[RESOLVED] CRITICAL "+ntfFallbackAlert, "good", "Resolved: ")
	})
	sink.log(t)
}

// ntfBinaries are the programs of Debian's packages the test runs.
type ntfBinaries struct{ prometheus, alertmanager string }

// ntfTools finds prometheus and Alertmanager (Debian names it
// prometheus-alertmanager) and redis-server; without them the test fails
// when CI is set and is skipped otherwise.
func ntfTools(t *testing.T) ntfBinaries {
	t.Helper()
	var b ntfBinaries
	var err error
	if b.prometheus, err = exec.LookPath("prometheus"); err != nil {
		testkit.Unavailable(t, "prometheus not found (Debian/Ubuntu: apt-get install prometheus): %v", err)
	}
	if b.alertmanager, err = exec.LookPath("prometheus-alertmanager"); err != nil {
		if b.alertmanager, err = exec.LookPath("alertmanager"); err != nil {
			testkit.Unavailable(t, "alertmanager not found (Debian/Ubuntu: apt-get install prometheus-alertmanager): %v", err)
		}
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		testkit.Unavailable(t, "redis-server not found (Debian/Ubuntu: apt-get install redis-server): %v", err)
	}
	return b
}

// ntfStartAlertmanager runs Alertmanager with the shipped configuration,
// rewritten as TestNotificationRedisFallback says, and returns its address.
func ntfStartAlertmanager(t *testing.T, bin string, sink *ntfSink) string {
	t.Helper()
	var cfg map[string]any
	obsReadYAML(t, amConfigFile, &cfg)
	dir := t.TempDir()
	secret := func(name, value string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(value), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	slackURLFile := secret("slack_api_url", sink.url+"/slack")
	tokenFile := secret("webhook_token", sink.token)

	tmplDir, err := filepath.Abs(amTemplatesDir)
	if err != nil {
		t.Fatal(err)
	}
	tmpls := manifestStrings(cfg["templates"])
	for i, p := range tmpls {
		tmpls[i] = filepath.Join(tmplDir, filepath.Base(p))
	}
	cfg["templates"] = tmpls

	var shorten func(route map[string]any)
	shorten = func(route map[string]any) {
		for _, k := range []string{"group_wait", "group_interval"} {
			if route[k] != nil {
				route[k] = "1s"
			}
		}
		for _, r := range manifestList(route["routes"]) {
			shorten(manifestMap(r))
		}
	}
	shorten(manifestMap(cfg["route"]))

	for _, r := range manifestList(cfg["receivers"]) {
		rcv := manifestMap(r)
		delete(rcv, "email_configs")
		for _, w := range manifestList(rcv["webhook_configs"]) {
			wh := manifestMap(w)
			wh["url"] = sink.url + "/webhook"
			auth := manifestMap(manifestAt(wh, "http_config", "authorization"))
			if auth == nil || auth["credentials_file"] == nil {
				t.Fatalf("%s: a webhook without a bearer token read from a file", amConfigFile)
			}
			auth["credentials_file"] = tokenFile
		}
		for _, s := range manifestList(rcv["slack_configs"]) {
			sl := manifestMap(s)
			if sl["api_url_file"] == nil {
				t.Fatalf("%s: a Slack integration without api_url_file", amConfigFile)
			}
			sl["api_url_file"] = slackURLFile
		}
	}

	addr := proctest.FreeAddr(t)
	ntfRun(t, bin, "http://"+addr+"/-/ready",
		"--config.file="+amWriteYAML(t, cfg),
		"--storage.path="+t.TempDir(),
		"--web.listen-address="+addr,
		"--cluster.listen-address=", // no gossip port: a single instance
	)
	return addr
}

// ntfStartPrometheus runs Prometheus with the shipped configuration and
// alert rules, rewritten as TestNotificationRedisFallback says.
func ntfStartPrometheus(t *testing.T, bin, limiter, alertmanager string) {
	t.Helper()
	var rules struct {
		Groups []map[string]any `yaml:"groups"`
	}
	obsReadYAML(t, obsAlertsFile, &rules)
	found := false
	for _, g := range rules.Groups {
		for _, r := range manifestList(g["rules"]) {
			rule := manifestMap(r)
			if d, err := time.ParseDuration(manifestStr(rule["for"])); err == nil && d > 0 {
				rule["for"] = "2s"
			}
			found = found || rule["alert"] == ntfFallbackAlert
		}
	}
	if !found {
		t.Fatalf("%s: no alert %s", obsAlertsFile, ntfFallbackAlert)
	}
	dir := t.TempDir()
	rulesFile := filepath.Join(dir, "alerts.yml")
	ntfWriteYAML(t, rulesFile, rules)

	var cfg map[string]any
	obsReadYAML(t, obsPromConfigFile, &cfg)
	cfg["global"] = map[string]any{"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"}
	cfg["rule_files"] = []string{rulesFile}
	cfg["scrape_configs"] = []any{map[string]any{
		"job_name":       "limiter",
		"static_configs": []any{map[string]any{"targets": []string{limiter}}},
	}}
	ams := manifestList(manifestAt(cfg, "alerting", "alertmanagers"))
	if len(ams) == 0 {
		t.Fatalf("%s: no alerting.alertmanagers", obsPromConfigFile)
	}
	for _, a := range ams {
		manifestMap(a)["static_configs"] = []any{map[string]any{"targets": []string{alertmanager}}}
	}
	cfgFile := filepath.Join(dir, "prometheus.yml")
	ntfWriteYAML(t, cfgFile, cfg)

	addr := proctest.FreeAddr(t)
	ntfRun(t, bin, "http://"+addr+"/-/ready",
		"--config.file="+cfgFile,
		"--storage.tsdb.path="+t.TempDir(),
		"--web.listen-address="+addr,
		"--rules.alert.resend-delay=1s",
	)
}

func ntfWriteYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// ntfRun runs bin with args until the test ends (SIGTERM, then SIGKILL
// after 10 s) and waits for ready to answer 200. Its output is logged when
// the test fails.
func ntfRun(t *testing.T, bin, ready string, args ...string) {
	t.Helper()
	done, out := proctest.Run(t, exec.Command(bin, args...))
	testkit.WaitFor(t, ntfDeadline, filepath.Base(bin)+" ready", func() bool {
		select {
		case <-done:
			t.Fatalf("%s exited:\n%s", filepath.Base(bin), out.String())
		default:
		}
		resp, err := http.Get(ready)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}
