// The metric-name check: which names and labels the services register
// (read from the Go sources) and which an expression uses.

package deploy_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ratewarden/ratewarden/internal/telemetry"
)

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
	// Options whose name is the first parameter of a function literal
	// (counter := func(name, help string) prometheus.Counter {...}): the
	// names are the first arguments of that function's calls.
	helpers := obsNameHelpers(file)
	ast.Inspect(file, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) == 0 {
			return true
		}
		kind, ok := helpers[obsIdent(call.Fun)]
		if name := obsString(call.Args[0]); ok && strings.HasPrefix(name, "rate_limit_") {
			out[name] = obsMetric{kind: kind, labels: slices.Clone(obsScrapeLabels)}
		}
		return true
	})
}

// obsNameHelpers returns the function literals of file, by the variable
// they are assigned to, that pass their first parameter as the Name of a
// prometheus.*Opts literal, with the kind of those options.
func obsNameHelpers(file *ast.File) map[string]string {
	helpers := map[string]string{}
	ast.Inspect(file, func(n ast.Node) bool {
		as, ok := n.(*ast.AssignStmt)
		if !ok || len(as.Lhs) != 1 || len(as.Rhs) != 1 {
			return true
		}
		fn, ok := as.Rhs[0].(*ast.FuncLit)
		if !ok || len(fn.Type.Params.List) == 0 || len(fn.Type.Params.List[0].Names) == 0 {
			return true
		}
		param := fn.Type.Params.List[0].Names[0].Name
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			lit, ok := n.(*ast.CompositeLit)
			if !ok {
				return true
			}
			sel, ok := lit.Type.(*ast.SelectorExpr)
			if !ok || obsIdent(sel.X) != "prometheus" {
				return true
			}
			kind, ok := obsOptsKinds[sel.Sel.Name]
			if !ok {
				return true
			}
			for _, e := range lit.Elts {
				if kv, ok := e.(*ast.KeyValueExpr); ok && obsIdent(kv.Key) == "Name" && obsIdent(kv.Value) == param {
					helpers[obsIdent(as.Lhs[0])] = kind
				}
			}
			return true
		})
		return true
	})
	return helpers
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
