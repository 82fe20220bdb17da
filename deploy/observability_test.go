package deploy_test

import (
	"context"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ratewarden/ratewarden/internal/telemetry"
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
		if s := r.Labels["severity"]; s != "warning" && s != "critical" {
			t.Errorf("alert %s: severity %q, want warning or critical", r.Alert, s)
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

var (
	// obsNameRE finds the metric names of the services in an expression.
	obsNameRE = regexp.MustCompile(`\b(?:rate_limit|go|process)_\w+`)
	// obsStringRE finds PromQL strings, whose content is no metric name.
	obsStringRE = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`")
	// obsSelectorRE finds a metric name with its label matchers.
	obsSelectorRE = regexp.MustCompile(`\b((?:rate_limit|go|process)_\w+)\s*\{([^}]*)\}`)
	obsMatcherRE  = regexp.MustCompile(`(\w+)\s*(?:=~|!~|!=|=)`)
	// obsGroupingRE finds the label lists of aggregations and vector matching.
	obsGroupingRE = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
)

// obsCheckExpr returns what in expr the services do not register: unknown
// metric names (the _bucket, _sum and _count series of histograms and
// summaries are known), label names in a selector that its metric does not
// have, and grouping labels that no metric of expr has.
func obsCheckExpr(expr string, reg map[string]obsMetric) []string {
	var problems []string
	known := map[string]obsMetric{}
	bare := obsStringRE.ReplaceAllString(expr, `""`)
	for _, name := range obsNameRE.FindAllString(bare, -1) {
		if _, done := known[name]; done {
			continue
		}
		m, ok := obsLookup(name, reg)
		if !ok {
			problems = append(problems, "unknown metric "+name)
			continue
		}
		known[name] = m
	}
	for _, sel := range obsSelectorRE.FindAllStringSubmatch(expr, -1) {
		m, ok := known[sel[1]]
		if !ok {
			continue // reported above
		}
		matchers := obsStringRE.ReplaceAllString(sel[2], `""`)
		for _, l := range obsMatcherRE.FindAllStringSubmatch(matchers, -1) {
			if l[1] != "__name__" && !slices.Contains(m.labels, l[1]) {
				problems = append(problems, "label "+strconv.Quote(l[1])+" not on "+sel[1]+" (labels: "+strings.Join(m.labels, ", ")+")")
			}
		}
	}
	var all []string
	for _, m := range known {
		all = append(all, m.labels...)
	}
	for _, g := range obsGroupingRE.FindAllStringSubmatch(bare, -1) {
		for _, l := range strings.Split(g[1], ",") {
			if l = strings.TrimSpace(l); l != "" && len(known) > 0 && !slices.Contains(all, l) {
				problems = append(problems, "grouping label "+strconv.Quote(l)+" on none of the metrics of the expression")
			}
		}
	}
	return problems
}

// obsLookup finds name among the registered metrics, as a whole or as a
// series of a histogram or summary.
func obsLookup(name string, reg map[string]obsMetric) (obsMetric, bool) {
	if m, ok := reg[name]; ok {
		return m, true
	}
	for _, s := range []struct{ suffix, label string }{{"_bucket", "le"}, {"_sum", ""}, {"_count", ""}} {
		base, ok := strings.CutSuffix(name, s.suffix)
		if !ok {
			continue
		}
		m, ok := reg[base]
		if !ok || (m.kind != "histogram" && m.kind != "summary") || (s.suffix == "_bucket" && m.kind != "histogram") {
			return obsMetric{}, false
		}
		labels := slices.Clone(m.labels)
		if s.label != "" {
			labels = append(labels, s.label)
		}
		return obsMetric{kind: "counter", labels: labels}, true
	}
	return obsMetric{}, false
}

// obsRegisteredMetrics returns the metrics the services expose: the
// rate_limit_ metrics declared in the Go sources of ../internal and ../cmd,
// and the go_ and process_ metrics of the registry every service starts
// from.
func obsRegisteredMetrics(tb testing.TB) map[string]obsMetric {
	tb.Helper()
	reg := obsSourceMetrics(tb, "../internal", "../cmd")
	for _, must := range []string{"rate_limit_requests_total", "rate_limit_redis_pipeline_calls", "rate_limit_detector_bans_total", "rate_limit_archiver_dead_lettered_total"} {
		if _, ok := reg[must]; !ok {
			tb.Fatalf("the source scan found no %s: it no longer understands how metrics are declared (found %d)", must, len(reg))
		}
	}
	families, err := telemetry.NewRegistry().Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, f := range families {
		m := obsMetric{kind: strings.ToLower(f.GetType().String()), labels: slices.Clone(obsScrapeLabels)}
		if m.kind == "summary" {
			m.labels = append(m.labels, "quantile")
		}
		for _, s := range f.GetMetric() {
			for _, lp := range s.GetLabel() {
				if !slices.Contains(m.labels, lp.GetName()) {
					m.labels = append(m.labels, lp.GetName())
				}
			}
		}
		reg[f.GetName()] = m
	}
	return reg
}

// obsOptsKinds maps the client_golang options types to metric types.
var obsOptsKinds = map[string]string{
	"CounterOpts":   "counter",
	"GaugeOpts":     "gauge",
	"HistogramOpts": "histogram",
	"SummaryOpts":   "summary",
}

// obsSourceMetrics parses the non-test Go files under roots and returns the
// rate_limit_ metrics declared with prometheus.*Opts{Name: "..."} literals,
// their label names taken from the []string{...} argument of the same call
// and from ConstLabels.
func obsSourceMetrics(tb testing.TB, roots ...string) map[string]obsMetric {
	tb.Helper()
	out := map[string]obsMetric{}
	for _, root := range roots {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == "testdata" {
				return filepath.SkipDir
			}
			if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			file, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			obsFileMetrics(file, out)
			return nil
		})
		if err != nil {
			tb.Fatalf("scan %s: %v", root, err)
		}
	}
	return out
}

func obsFileMetrics(file *ast.File, out map[string]obsMetric) {
	labelVars := obsLabelsVars(file)
	declared := map[*ast.CompositeLit]bool{}
	record := func(opts *ast.CompositeLit, varLabels []string) {
		name, kind, constLabels, ok := obsOpts(opts, labelVars)
		if !ok || !strings.HasPrefix(name, "rate_limit_") {
			return
		}
		declared[opts] = true
		labels := slices.Concat(obsScrapeLabels, constLabels, varLabels)
		if prev, ok := out[name]; ok {
			labels = slices.Concat(prev.labels, labels)
		}
		slices.Sort(labels)
		out[name] = obsMetric{kind: kind, labels: slices.Compact(labels)}
	}
	// Options passed to a constructor, with the variable labels of a *Vec.
	ast.Inspect(file, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		var opts []*ast.CompositeLit
		var labels []string
		for _, arg := range call.Args {
			lit, ok := arg.(*ast.CompositeLit)
			if !ok {
				continue
			}
			if arr, ok := lit.Type.(*ast.ArrayType); ok && obsIdent(arr.Elt) == "string" {
				labels = append(labels, obsStrings(lit.Elts)...)
			} else {
				opts = append(opts, lit)
			}
		}
		for _, o := range opts {
			record(o, labels)
		}
		return true
	})
	// Options built apart from the constructor call (no variable labels
	// known: the check then accepts only the scrape and const labels).
	ast.Inspect(file, func(n ast.Node) bool {
		if lit, ok := n.(*ast.CompositeLit); ok && !declared[lit] {
			record(lit, nil)
		}
		return true
	})
}

// obsOpts reads the fully qualified name, the kind and the const label names
// of a prometheus.*Opts literal.
func obsOpts(lit *ast.CompositeLit, labelVars map[string][]string) (name, kind string, constLabels []string, ok bool) {
	sel, isSel := lit.Type.(*ast.SelectorExpr)
	if !isSel || obsIdent(sel.X) != "prometheus" {
		return "", "", nil, false
	}
	if kind, ok = obsOptsKinds[sel.Sel.Name]; !ok {
		return "", "", nil, false
	}
	var parts [3]string // namespace, subsystem, name
	for _, e := range lit.Elts {
		kv, isKV := e.(*ast.KeyValueExpr)
		if !isKV {
			continue
		}
		switch obsIdent(kv.Key) {
		case "Namespace":
			parts[0] = obsString(kv.Value)
		case "Subsystem":
			parts[1] = obsString(kv.Value)
		case "Name":
			parts[2] = obsString(kv.Value)
		case "ConstLabels":
			switch v := kv.Value.(type) {
			case *ast.CompositeLit:
				constLabels = obsMapKeys(v)
			case *ast.Ident:
				constLabels = labelVars[v.Name]
			}
		}
	}
	if parts[2] == "" {
		return "", "", nil, false
	}
	var fq []string
	for _, p := range parts {
		if p != "" {
			fq = append(fq, p)
		}
	}
	return strings.Join(fq, "_"), kind, constLabels, true
}

// obsLabelsVars returns the keys of the prometheus.Labels{...} literals
// assigned to a variable in file, by variable name.
func obsLabelsVars(file *ast.File) map[string][]string {
	vars := map[string][]string{}
	ast.Inspect(file, func(n ast.Node) bool {
		as, ok := n.(*ast.AssignStmt)
		if !ok || len(as.Lhs) != len(as.Rhs) {
			return true
		}
		for i, rhs := range as.Rhs {
			lit, ok := rhs.(*ast.CompositeLit)
			if !ok {
				continue
			}
			if sel, ok := lit.Type.(*ast.SelectorExpr); ok && sel.Sel.Name == "Labels" {
				vars[obsIdent(as.Lhs[i])] = obsMapKeys(lit)
			}
		}
		return true
	})
	return vars
}

func obsMapKeys(lit *ast.CompositeLit) []string {
	var keys []string
	for _, e := range lit.Elts {
		if kv, ok := e.(*ast.KeyValueExpr); ok {
			if k := obsString(kv.Key); k != "" {
				keys = append(keys, k)
			}
		}
	}
	return keys
}

func obsStrings(es []ast.Expr) []string {
	var out []string
	for _, e := range es {
		if s := obsString(e); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func obsString(e ast.Expr) string {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return ""
	}
	s, err := strconv.Unquote(lit.Value)
	if err != nil {
		return ""
	}
	return s
}

func obsIdent(e ast.Expr) string {
	if id, ok := e.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

// obsPromtool returns the path of promtool. Without it the test fails when
// the CI variable is set and is skipped otherwise.
func obsPromtool(tb testing.TB) string {
	tb.Helper()
	path, err := exec.LookPath("promtool")
	if err == nil {
		return path
	}
	const msg = "promtool not found (Debian/Ubuntu: apt-get install prometheus; or a Prometheus release tarball)"
	if os.Getenv("CI") != "" {
		tb.Fatalf("%s: %v", msg, err)
	}
	tb.Skipf("%s; skipped because CI is unset", msg)
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
