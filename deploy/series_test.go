package deploy_test

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/ratewarden/ratewarden/internal/testkit/kafkatest"
	"github.com/ratewarden/ratewarden/internal/testkit/pgtest"
	"github.com/ratewarden/ratewarden/internal/testkit/proctest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// obsServices are the processes Prometheus scrapes, by job name.
var obsServices = []string{"limiter", "detector", "archiver", "notifier"}

// TestObservabilitySeriesAtStart starts the limiter, the detector, the
// archiver and the notifier as built from cmd/, with the example rules and the default
// topics, against the local Redis and Postgres and an embedded broker. Right
// after each is ready, before any traffic, it scrapes /metrics; then every
// selector of the alerts and of the dashboard must select a series of
// them, a value a matcher names (class="timeout", result=~"ok|exempt")
// included, so no panel shows "No data" and no alert misses its input on a
// fresh stack.
func TestObservabilitySeriesAtStart(t *testing.T) {
	scraped := startAndScrape(t)

	var problems []string
	exprs := 0
	check := func(where, expr string) {
		exprs++
		missing, err := missingSeries(expr, scraped)
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		for _, m := range missing {
			problems = append(problems, where+": "+m)
		}
	}
	for _, r := range obsLoadAlertRules(t) {
		check(obsAlertsFile+": alert "+r.Alert+r.Record, r.Expr)
	}
	for _, p := range obsPanels(obsLoadDashboard(t).Panels) {
		for _, tg := range p.Targets {
			check(obsDashboardFile+": panel "+strconv.Itoa(p.ID)+" "+strconv.Quote(p.Title)+" target "+tg.RefID, tg.Expr)
		}
	}
	if len(problems) > 0 {
		t.Errorf("%d selectors find no series on a freshly started stack:\n%s", len(problems), strings.Join(problems, "\n"))
	}
	t.Logf("%d expressions checked against %d series", exprs, len(scraped))
}

// startAndScrape starts every service, scrapes each as soon as it is ready
// and returns their series, labelled with the job and instance Prometheus
// would add.
func startAndScrape(t *testing.T) []series {
	t.Helper()
	rules, err := filepath.Abs("rules.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	broker := kafkatest.StartBroker(t, "ratelimit.decisions", "ratelimit.bans")
	stamp := strconv.FormatInt(time.Now().UnixNano(), 36)
	env := []string{
		"KAFKA_BROKERS=" + broker.Addr(),
		"REDIS_URL=" + redistest.RequiredURL(t),
		"REDIS_CLUSTER_ADDRS=",
		"REDIS_KEY_PREFIX=" + redistest.Prefix(t, redistest.Client(t)),
		"DATABASE_URL=" + pgtest.Database(t),
		"RULES_FILE=" + rules,
		"DETECTOR_GROUP_ID=series-detector-" + stamp,
		"ARCHIVER_GROUP_ID=series-archiver-" + stamp,
		"NOTIFY_GROUP_ID=series-notifier-" + stamp,
		// The compose file's receivers: never posted to, as no ban comes.
		"NOTIFY_RECEIVERS_FILE=" + filepath.Join(filepath.Dir(rules), "compose", "receivers.example.yaml"),
		"LOG_FORMAT=json",
	}
	var pkgs []string
	for _, name := range obsServices {
		pkgs = append(pkgs, "../cmd/"+name)
	}
	bins := proctest.Build(t, pkgs...)
	var out []series
	for _, name := range obsServices {
		addr := startService(t, filepath.Join(bins, name), env)
		out = append(out, scrape(t, addr, map[string]string{"job": name, "instance": addr})...)
	}
	return out
}

// startService runs bin with env on a free LISTEN_ADDR until the test ends
// (SIGTERM, then SIGKILL after 10 s) and returns its address once /readyz
// answers 200, however long the machine takes.
func startService(t *testing.T, bin string, env []string) string {
	t.Helper()
	addr := proctest.FreeAddr(t)
	cmd := exec.Command(bin)
	// The limiter's gRPC port is chosen by the kernel (the others ignore it).
	cmd.Env = append(append(os.Environ(), env...), "LISTEN_ADDR="+addr, "GRPC_LISTEN_ADDR=127.0.0.1:0")
	done, out := proctest.Run(t, cmd)
	// No deadline of its own: only the test's, less a margin to report.
	var giveUp <-chan time.Time
	if d, ok := t.Deadline(); ok {
		giveUp = time.After(time.Until(d) - 30*time.Second)
	}
	for !ready(addr) {
		select {
		case <-done:
			t.Fatalf("%s exited before it was ready:\n%s", filepath.Base(bin), out.String())
		case <-giveUp:
			t.Fatalf("%s not ready by the test's deadline", filepath.Base(bin))
		case <-time.After(50 * time.Millisecond):
		}
	}
	return addr
}

func ready(addr string) bool {
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// scrape reads the /metrics of addr and returns its series with extra
// labels added.
func scrape(t *testing.T, addr string, extra map[string]string) []series {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s/metrics: %s", addr, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("%s/metrics: %v", addr, err)
	}
	return flatten(families, extra)
}

// TestObservabilitySeriesCheck shows what the check above reports, on
// series made up for it: a selector, or a value of one, without a series.
func TestObservabilitySeriesCheck(t *testing.T) {
	scraped := []series{
		{name: "rate_limit_redis_errors_total", labels: map[string]string{"job": "limiter", "class": "timeout"}},
		{name: "rate_limit_requests_total", labels: map[string]string{"job": "limiter", "result": "ok", "shadow": "false"}},
		{name: "rate_limit_requests_total", labels: map[string]string{"job": "limiter", "result": "rate_limited", "shadow": "true"}},
		{name: "rate_limit_check_duration_seconds_bucket", labels: map[string]string{"job": "limiter", "le": "+Inf", "algorithm": "none"}},
		{name: "go_goroutines", labels: map[string]string{"job": "limiter"}},
		{name: "go_goroutines", labels: map[string]string{"job": "detector"}},
	}
	tests := []struct {
		name string
		expr string
		want []string // substrings of the problems, in order; none: clean
	}{
		{name: "bare name", expr: `sum by (class) (rate(rate_limit_redis_errors_total[$__rate_interval]))`},
		{name: "label value present", expr: `rate_limit_redis_errors_total{class="timeout"}`},
		{name: "histogram series", expr: `histogram_quantile(0.99, sum by (le) (rate(rate_limit_check_duration_seconds_bucket[5m])))`},
		{name: "negative matchers", expr: `rate_limit_requests_total{result!="banned", shadow!~"x|y"}`},
		{name: "regex that lists nothing", expr: `rate_limit_requests_total{result=~"rate_.*"}`},
		{name: "up is Prometheus' own", expr: `up{job=~"limiter|detector|archiver"} == 0`},
		{name: "name inside a string", expr: `label_replace(go_goroutines, "x", "rate_limit_nope_total", "", "")`},
		{name: "metric without series", expr: `rate(rate_limit_detector_bans_total[5m])`,
			want: []string{"no series rate_limit_detector_bans_total (the metric has no series at all)"}},
		{name: "label value missing", expr: `rate_limit_redis_errors_total{class="connection"}`,
			want: []string{`no series rate_limit_redis_errors_total{class="connection"} (values present: class: timeout)`}},
		{name: "matchers must hold on one series", expr: `rate_limit_requests_total{result="ok", shadow="true"}`,
			want: []string{`result="ok", shadow="true"`}},
		{name: "each listed value needs a series", expr: `rate_limit_requests_total{result=~"ok|exempt|no_rule"}`,
			want: []string{`result="exempt"`, `result="no_rule"`}},
		{name: "each listed job too", expr: `sum by (job) (go_goroutines{job=~"limiter|detector|archiver"})`,
			want: []string{`go_goroutines{job="archiver"}`}},
		{name: "reported once per expression", expr: `rate_limit_nope_total / rate_limit_nope_total`,
			want: []string{"rate_limit_nope_total"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := missingSeries(tt.expr, scraped)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("missingSeries(%q) = %q, want %d problems matching %q", tt.expr, got, len(tt.want), tt.want)
			}
			for i, w := range tt.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("problem %d = %q, want it to mention %q", i, got[i], w)
				}
			}
		})
	}
}

// TestObservabilitySelectors checks the selector parser on the forms the
// alerts and the dashboard use.
func TestObservabilitySelectors(t *testing.T) {
	tests := []struct {
		expr string
		want []string
	}{
		{`rate_limit_mode{mode="redis"} == 0`, []string{`rate_limit_mode{mode="redis"}`}},
		{"sum by (rule) (rate(rate_limit_requests_total{result=\"rate_limited\",shadow='false'}[5m]))",
			[]string{`rate_limit_requests_total{result="rate_limited", shadow="false"}`}},
		{"rate_limit_events_dropped_total{ topic = `a\"b` , }", []string{`rate_limit_events_dropped_total{topic="a\"b"}`}},
		{`rate_limit_a{x=~"1|2"} / on (instance) process_cpu_seconds_total[$__rate_interval]`,
			[]string{`rate_limit_a{x=~"1|2"}`, `process_cpu_seconds_total`}},
		{`up + vector(0) + rate_limit_x{l="}"}`, []string{`rate_limit_x{l="}"}`}},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			sels, err := selectors(tt.expr)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, s := range sels {
				got = append(got, s.String())
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("selectors = %q, want %q", got, tt.want)
			}
		})
	}
	for _, bad := range []string{`rate_limit_a{x="1"`, `rate_limit_a{x 1}`, `rate_limit_a{x="1}`} {
		if _, err := selectors(bad); err == nil {
			t.Errorf("selectors(%q): no error", bad)
		}
	}
}
