package deploy_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ratewarden/ratewarden/internal/testkit"
)

// The files under test, relative to this package's directory (go test runs
// there).
const (
	obsAlertsFile     = "prometheus/alerts.yml"
	obsAlertTestsFile = "prometheus/alerts_test.yml"
	obsPromConfigFile = "prometheus/prometheus.yml"
	obsDashboardFile  = "grafana/dashboards/ratewarden.json"
	obsDatasourceUID  = "prometheus"
)

// obsSeverities are the values of the severity label of the alerts, from
// the least urgent; Alertmanager routes on them
// (deploy/alertmanager/alertmanager.yml, docs/notifications.md).
var obsSeverities = []string{"info", "warning", "critical"}

// obsScrapeLabels are the labels Prometheus adds to every scraped series.
var obsScrapeLabels = []string{"job", "instance"}

// obsMetric is a metric a service registers: its type (counter, gauge,
// histogram, summary) and label names.
type obsMetric struct {
	kind   string
	labels []string
}

// TestObservabilityMetricNames checks that every metric the alert rules and
// the dashboard query is one the services register, with label names it has.
func TestObservabilityMetricNames(t *testing.T) {
	reg := obsRegisteredMetrics(t)

	var problems []string
	for _, r := range obsLoadAlertRules(t) {
		for _, p := range obsCheckExpr(r.Expr, reg) {
			problems = append(problems, obsAlertsFile+": alert "+r.Alert+": "+p)
		}
	}
	for _, p := range obsPanels(obsLoadDashboard(t).Panels) {
		for _, tg := range p.Targets {
			for _, e := range obsCheckExpr(tg.Expr, reg) {
				problems = append(problems, obsDashboardFile+": panel "+strconv.Itoa(p.ID)+" "+strconv.Quote(p.Title)+" target "+tg.RefID+": "+e)
			}
		}
	}
	if len(problems) > 0 {
		t.Errorf("%d names the services do not register:\n%s", len(problems), strings.Join(problems, "\n"))
	}
}

// TestObservabilityExprCheck shows the check above catches a misspelt name
// with the metrics the services really register, rather than passing
// whatever it is given.
func TestObservabilityExprCheck(t *testing.T) {
	reg := obsRegisteredMetrics(t)
	tests := []struct {
		name string
		expr string
		want []string // substrings of the problems, in order; none: clean
	}{
		{name: "counter", expr: `sum by (rule) (rate(rate_limit_requests_total{result="rate_limited", shadow="false"}[5m]))`},
		{name: "histogram series and le", expr: `histogram_quantile(0.99, sum by (le, algorithm) (rate(rate_limit_check_duration_seconds_bucket[5m])))`},
		{name: "histogram registered in cmd", expr: `rate(rate_limit_redis_pipeline_calls_sum[1m]) / rate(rate_limit_redis_pipeline_calls_count[1m])`},
		{name: "const label", expr: `rate_limit_events_dropped_total{topic="ratelimit.decisions", reason="queue_full"}`},
		{name: "runtime and process collectors", expr: `go_goroutines{job="limiter"} + process_resident_memory_bytes + go_gc_duration_seconds_count`},
		{name: "a label value is not a metric", expr: `rate_limit_archiver_rows_inserted_total{table="rate_limit_violations_typo"}`},
		{name: "misspelt metric", expr: `rate(rate_limit_request_total[5m])`, want: []string{"unknown metric rate_limit_request_total"}},
		{name: "misspelt runtime metric", expr: `go_goroutine`, want: []string{"unknown metric go_goroutine"}},
		{name: "histogram suffix on a counter", expr: `rate_limit_requests_total_bucket`, want: []string{"unknown metric rate_limit_requests_total_bucket"}},
		{name: "all unknown names listed", expr: `rate_limit_nope_total + rate_limit_mode + rate_limit_nada`, want: []string{"rate_limit_nope_total", "rate_limit_nada"}},
		{name: "misspelt selector label", expr: `rate_limit_requests_total{reslt="ok"}`, want: []string{`label "reslt"`}},
		{name: "label of another metric", expr: `rate_limit_mode{reason="x"}`, want: []string{`label "reason"`}},
		{name: "misspelt grouping label", expr: `sum by (rul) (rate(rate_limit_requests_total[5m]))`, want: []string{`label "rul"`}},
		{name: "le on a counter", expr: `sum by (le) (rate_limit_requests_total)`, want: []string{`label "le"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := obsCheckExpr(tt.expr, reg)
			if len(got) != len(tt.want) {
				t.Fatalf("obsCheckExpr(%q) = %q, want %d problems matching %q", tt.expr, got, len(tt.want), tt.want)
			}
			for i, w := range tt.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("problem %d = %q, want it to mention %q", i, got[i], w)
				}
			}
		})
	}
}

// TestObservabilityAlertRules checks what the alerts need to be actionable:
// a for duration, a severity and a summary and description.
func TestObservabilityAlertRules(t *testing.T) {
	rules := obsLoadAlertRules(t)
	if len(rules) == 0 {
		t.Fatalf("%s: no alerting rules", obsAlertsFile)
	}
	seen := map[string]bool{}
	for _, r := range rules {
		if r.Alert == "" {
			continue // a recording rule
		}
		if seen[r.Alert] {
			t.Errorf("alert %s: defined twice", r.Alert)
		}
		seen[r.Alert] = true
		if r.For == "" {
			t.Errorf("alert %s: no for: (write for: 0m to fire at once)", r.Alert)
		}
		if s := r.Labels["severity"]; !slices.Contains(obsSeverities, s) {
			t.Errorf("alert %s: severity %q, want one of %q", r.Alert, s, obsSeverities)
		}
		for _, k := range []string{"summary", "description"} {
			if strings.TrimSpace(r.Annotations[k]) == "" {
				t.Errorf("alert %s: no %s annotation", r.Alert, k)
			}
		}
	}
}

// TestObservabilityPromtool checks the rules and the configuration with
// promtool and runs the alerts' unit tests. Without promtool the test fails
// when CI is set and is skipped otherwise.
func TestObservabilityPromtool(t *testing.T) {
	promtool := obsPromtool(t)

	t.Run("check rules", func(t *testing.T) {
		obsRun(t, ".", promtool, "check", "rules", obsAlertsFile)
	})
	t.Run("test rules", func(t *testing.T) {
		obsRun(t, ".", promtool, "test", "rules", obsAlertTestsFile)
	})
	t.Run("check config", func(t *testing.T) {
		// The configuration names the rule files where the container mounts
		// them (/etc/prometheus). promtool check config loads them too, so a
		// copy pointing at the files of this directory is checked: the
		// configuration and the rules are validated together, whatever
		// /etc/prometheus holds on this machine.
		cfg := obsRewriteRuleFiles(t, obsPromConfigFile)
		obsRun(t, ".", promtool, "check", "config", cfg)
	})
}

// TestObservabilityScrapeConfig checks that Prometheus scrapes the three
// services and loads the alerts.
func TestObservabilityScrapeConfig(t *testing.T) {
	var cfg struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	obsReadYAML(t, obsPromConfigFile, &cfg)
	if !slices.Contains(cfg.RuleFiles, "/etc/prometheus/alerts.yml") {
		t.Errorf("%s: rule_files = %q, want /etc/prometheus/alerts.yml", obsPromConfigFile, cfg.RuleFiles)
	}
	targets := map[string]int{}
	for _, sc := range cfg.ScrapeConfigs {
		for _, s := range sc.StaticConfigs {
			targets[sc.JobName] += len(s.Targets)
		}
	}
	for _, job := range []string{"limiter", "detector", "archiver"} {
		if targets[job] == 0 {
			t.Errorf("%s: job %s has no targets", obsPromConfigFile, job)
		}
	}
}

// TestObservabilityDashboard checks the dashboard's structure: every panel
// queries the provisioned datasource with at least one expression, and panel
// ids are unique.
func TestObservabilityDashboard(t *testing.T) {
	d := obsLoadDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("dashboard uid %q, title %q: want both", d.UID, d.Title)
	}
	if d.SchemaVersion < 36 {
		t.Errorf("schemaVersion %d: want 36 or later (datasources by uid)", d.SchemaVersion)
	}
	panels := obsPanels(d.Panels)
	if len(panels) == 0 {
		t.Fatal("no panels")
	}
	ids := map[int]string{}
	for _, p := range panels {
		name := strconv.Itoa(p.ID) + " " + strconv.Quote(p.Title)
		if p.ID <= 0 {
			t.Errorf("panel %s: id %d, want a positive id", name, p.ID)
		} else if other, dup := ids[p.ID]; dup {
			t.Errorf("panel %s: id also used by %s", name, other)
		}
		ids[p.ID] = strconv.Quote(p.Title)
		if p.Type == "row" {
			continue // rows only group panels
		}
		if p.Datasource == nil || p.Datasource.UID != obsDatasourceUID {
			t.Errorf("panel %s: datasource %+v, want uid %q", name, p.Datasource, obsDatasourceUID)
		}
		exprs := 0
		for _, tg := range p.Targets {
			if tg.Datasource != nil && tg.Datasource.UID != obsDatasourceUID {
				t.Errorf("panel %s target %s: datasource uid %q, want %q", name, tg.RefID, tg.Datasource.UID, obsDatasourceUID)
			}
			if strings.TrimSpace(tg.Expr) != "" {
				exprs++
			} else {
				t.Errorf("panel %s target %s: empty expr", name, tg.RefID)
			}
		}
		if exprs == 0 {
			t.Errorf("panel %s: no target with an expr", name)
		}
	}
}

// obsRule is one rule of a Prometheus rule file.
type obsRule struct {
	Alert       string            `yaml:"alert"`
	Record      string            `yaml:"record"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func obsLoadAlertRules(tb testing.TB) []obsRule {
	tb.Helper()
	var f struct {
		Groups []struct {
			Name  string    `yaml:"name"`
			Rules []obsRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	obsReadYAML(tb, obsAlertsFile, &f)
	var rules []obsRule
	for _, g := range f.Groups {
		rules = append(rules, g.Rules...)
	}
	return rules
}

func obsReadYAML(tb testing.TB, path string, v any) {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		tb.Fatalf("%s: %v", path, err)
	}
}

// obsDashboard is the part of a Grafana dashboard the tests read.
type obsDashboard struct {
	UID           string     `json:"uid"`
	Title         string     `json:"title"`
	SchemaVersion int        `json:"schemaVersion"`
	Panels        []obsPanel `json:"panels"`
}

type obsPanel struct {
	ID         int            `json:"id"`
	Type       string         `json:"type"`
	Title      string         `json:"title"`
	Datasource *obsDatasource `json:"datasource"`
	Targets    []struct {
		RefID      string         `json:"refId"`
		Expr       string         `json:"expr"`
		Datasource *obsDatasource `json:"datasource"`
	} `json:"targets"`
	Panels []obsPanel `json:"panels"` // of a collapsed row
}

type obsDatasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

func obsLoadDashboard(tb testing.TB) obsDashboard {
	tb.Helper()
	b, err := os.ReadFile(obsDashboardFile)
	if err != nil {
		tb.Fatal(err)
	}
	var d obsDashboard
	if err := json.Unmarshal(b, &d); err != nil {
		tb.Fatalf("%s: %v", obsDashboardFile, err)
	}
	return d
}

// obsPanels flattens the panels of collapsed rows into the list.
func obsPanels(ps []obsPanel) []obsPanel {
	var out []obsPanel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, obsPanels(p.Panels)...)
	}
	return out
}

// obsPromtool returns the path of promtool. Without it the test fails when
// the CI variable is set and is skipped otherwise.
func obsPromtool(tb testing.TB) string {
	tb.Helper()
	path, err := exec.LookPath("promtool")
	if err == nil {
		return path
	}
	testkit.Unavailable(tb, "promtool not found (Debian/Ubuntu: apt-get install prometheus; or a Prometheus release tarball): %v", err)
	return ""
}

// obsRun runs a command in dir and fails with its output if it fails.
func obsRun(tb testing.TB, dir, name string, args ...string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		tb.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
	tb.Logf("%s %s:\n%s", filepath.Base(name), strings.Join(args, " "), out)
}

// obsRewriteRuleFiles writes a copy of the Prometheus configuration at path
// whose rule_files name the files of the same name beside path, and returns
// the copy's path.
func obsRewriteRuleFiles(tb testing.TB, path string) string {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		tb.Fatalf("%s: %v", path, err)
	}
	dir, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		tb.Fatal(err)
	}
	rewritten := 0
	if len(doc.Content) == 1 && doc.Content[0].Kind == yaml.MappingNode {
		root := doc.Content[0].Content
		for i := 0; i+1 < len(root); i += 2 {
			if root[i].Value != "rule_files" {
				continue
			}
			for _, f := range root[i+1].Content {
				local := filepath.Join(dir, filepath.Base(f.Value))
				if _, err := os.Stat(local); err != nil {
					tb.Fatalf("%s: rule file %s: no %s beside the configuration: %v", path, f.Value, filepath.Base(f.Value), err)
				}
				f.Value = local
				rewritten++
			}
		}
	}
	if rewritten == 0 {
		tb.Fatalf("%s: no rule_files", path)
	}
	out, err := yaml.Marshal(&doc)
	if err != nil {
		tb.Fatal(err)
	}
	copyPath := filepath.Join(tb.TempDir(), filepath.Base(path))
	if err := os.WriteFile(copyPath, out, 0o644); err != nil {
		tb.Fatal(err)
	}
	return copyPath
}
