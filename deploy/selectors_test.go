// The series check: which series a PromQL expression selects, against the
// series scraped from the services.

package deploy_test

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
)

// seriesNameRE recognises the metric names of the services (the series
// Prometheus makes itself, such as up, are not on /metrics).
var seriesNameRE = regexp.MustCompile(`^(?:rate_limit|go|process)_`)

// series is one scraped series: its name (with the _bucket, _sum or _count
// suffix of a histogram or summary) and labels, the scrape labels included.
type series struct {
	name   string
	labels map[string]string
}

// matcher is one label matcher of a selector: label, op (=, !=, =~, !~)
// and value.
type matcher struct {
	label, op, value string
}

// selector is a metric name and its label matchers.
type selector struct {
	name     string
	matchers []matcher
}

func (s selector) String() string {
	if len(s.matchers) == 0 {
		return s.name
	}
	parts := make([]string, len(s.matchers))
	for i, m := range s.matchers {
		parts[i] = m.label + m.op + strconv.Quote(m.value)
	}
	return s.name + "{" + strings.Join(parts, ", ") + "}"
}

// selectors returns the selectors of the services' metrics in expr, in
// order, skipping string literals, function names and grouping labels.
func selectors(expr string) ([]selector, error) {
	var out []selector
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			_, n, err := readString(expr[i:])
			if err != nil {
				return nil, fmt.Errorf("at %d: %w", i, err)
			}
			i += n
		case isIdentStart(c):
			j := i + identLen(expr[i:])
			name := expr[i:j]
			i = j
			if !seriesNameRE.MatchString(name) {
				continue
			}
			sel := selector{name: name}
			if k := skipSpace(expr, i); k < len(expr) && expr[k] == '{' {
				ms, n, err := readMatchers(expr[k:])
				if err != nil {
					return nil, fmt.Errorf("%s at %d: %w", name, k, err)
				}
				sel.matchers, i = ms, k+n
			}
			out = append(out, sel)
		case c == '$': // a Grafana variable: not a metric name
			i++
			i += identLen(expr[i:])
		default:
			i++
		}
	}
	return out, nil
}

// readMatchers reads "{label op "value", ...}" at the start of s and
// returns the matchers and the length read.
func readMatchers(s string) ([]matcher, int, error) {
	var out []matcher
	i := skipSpace(s, 1)
	for i < len(s) && s[i] != '}' {
		n := identLen(s[i:])
		if n == 0 {
			return nil, 0, fmt.Errorf("label name expected at %q", s[i:])
		}
		m := matcher{label: s[i : i+n]}
		i = skipSpace(s, i+n)
		for _, op := range []string{"=~", "!~", "!=", "="} {
			if strings.HasPrefix(s[i:], op) {
				m.op = op
				break
			}
		}
		if m.op == "" {
			return nil, 0, fmt.Errorf("matcher operator expected at %q", s[i:])
		}
		i = skipSpace(s, i+len(m.op))
		v, n, err := readString(s[i:])
		if err != nil {
			return nil, 0, err
		}
		m.value = v
		out = append(out, m)
		if i = skipSpace(s, i+n); i < len(s) && s[i] == ',' {
			i = skipSpace(s, i+1)
		}
	}
	if i >= len(s) {
		return nil, 0, fmt.Errorf("unclosed selector %q", s)
	}
	return out, i + 1, nil
}

// readString reads the PromQL string literal at the start of s and returns
// its value and length.
func readString(s string) (string, int, error) {
	if s == "" {
		return "", 0, fmt.Errorf("string expected")
	}
	q := s[0]
	for i := 1; i < len(s); i++ {
		switch {
		case s[i] == '\\' && q != '`':
			i++
		case s[i] == q:
			lit := s[:i+1]
			if q == '`' {
				return lit[1 : len(lit)-1], i + 1, nil
			}
			if q == '\'' {
				lit = `"` + strings.ReplaceAll(lit[1:len(lit)-1], `"`, `\"`) + `"`
			}
			v, err := strconv.Unquote(lit)
			return v, i + 1, err
		}
	}
	return "", 0, fmt.Errorf("unterminated string %q", s)
}

func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z')
}

func identLen(s string) int {
	n := 0
	for n < len(s) && (isIdentStart(s[n]) || ('0' <= s[n] && s[n] <= '9')) {
		n++
	}
	return n
}

func skipSpace(s string, i int) int {
	for i < len(s) && strings.ContainsRune(" \t\r\n", rune(s[i])) {
		i++
	}
	return i
}

// expand returns the selectors whose series sel must find: sel itself, and,
// for a regular expression matcher listing values (a|b|c), one selector per
// value, so each listed value needs a series of its own.
func expand(sel selector) []selector {
	variants := []selector{sel}
	expanded := false
	for i, m := range sel.matchers {
		values := literalAlternatives(m)
		if len(values) < 2 {
			continue
		}
		expanded = true
		var next []selector
		for _, s := range variants {
			for _, v := range values {
				c := selector{name: s.name, matchers: slices.Clone(s.matchers)}
				c.matchers[i] = matcher{label: m.label, op: "=", value: v}
				next = append(next, c)
			}
		}
		variants = next
	}
	if !expanded {
		return variants
	}
	return append([]selector{sel}, variants...)
}

// literalAlternatives returns the values of a =~ matcher made of plain
// values separated by |, and nil for any other matcher.
func literalAlternatives(m matcher) []string {
	if m.op != "=~" {
		return nil
	}
	values := strings.Split(m.value, "|")
	for _, v := range values {
		if v == "" || regexp.QuoteMeta(v) != v {
			return nil
		}
	}
	return values
}

// matches reports whether s is selected by sel.
func (sel selector) matches(s series) (bool, error) {
	if s.name != sel.name {
		return false, nil
	}
	for _, m := range sel.matchers {
		v := s.labels[m.label]
		var ok bool
		switch m.op {
		case "=":
			ok = v == m.value
		case "!=":
			ok = v != m.value
		case "=~", "!~":
			re, err := regexp.Compile("^(?:" + m.value + ")$")
			if err != nil {
				return false, fmt.Errorf("%s: %w", sel, err)
			}
			ok = re.MatchString(v) == (m.op == "=~")
		}
		if !ok {
			return false, nil
		}
	}
	return true, nil
}

// missingSeries returns what of expr selects no series among scraped: each
// selector, and each value a selector's =~ matcher lists, that matches
// nothing, with the label sets the metric does have.
func missingSeries(expr string, scraped []series) ([]string, error) {
	sels, err := selectors(expr)
	if err != nil {
		return nil, err
	}
	var problems []string
	seen := map[string]bool{}
	for _, sel := range sels {
		for _, want := range expand(sel) {
			if seen[want.String()] {
				continue
			}
			seen[want.String()] = true
			found, err := anyMatch(want, scraped)
			if err != nil {
				return nil, err
			}
			if !found {
				problems = append(problems, "no series "+want.String()+" ("+present(want, scraped)+")")
			}
		}
	}
	return problems, nil
}

func anyMatch(sel selector, scraped []series) (bool, error) {
	for _, s := range scraped {
		ok, err := sel.matches(s)
		if err != nil || ok {
			return ok, err
		}
	}
	return false, nil
}

// present describes what scraped holds of the metric of sel, for a failure
// message: the values of the labels sel matches on.
func present(sel selector, scraped []series) string {
	values := map[string][]string{}
	found := false
	for _, s := range scraped {
		if s.name != sel.name {
			continue
		}
		found = true
		for _, m := range sel.matchers {
			if v := s.labels[m.label]; !slices.Contains(values[m.label], v) {
				values[m.label] = append(values[m.label], v)
			}
		}
	}
	if !found {
		return "the metric has no series at all"
	}
	var parts []string
	for _, m := range sel.matchers {
		if vs, ok := values[m.label]; ok {
			slices.Sort(vs)
			parts = append(parts, m.label+": "+strings.Join(vs, " "))
			delete(values, m.label)
		}
	}
	return "values present: " + strings.Join(parts, "; ")
}

// flatten turns scraped metric families into series, as Prometheus stores
// them: histograms and summaries become their _bucket (le), _sum and _count
// series, or their quantile, _sum and _count series; extra (job, instance)
// are added to each.
func flatten(families map[string]*dto.MetricFamily, extra map[string]string) []series {
	var out []series
	for name, f := range families {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range extra {
				labels[k] = v
			}
			with := func(suffix, label, value string) series {
				ls := maps.Clone(labels)
				if label != "" {
					ls[label] = value
				}
				return series{name: name + suffix, labels: ls}
			}
			switch f.GetType() {
			case dto.MetricType_HISTOGRAM:
				for _, b := range m.GetHistogram().GetBucket() {
					out = append(out, with("_bucket", "le", strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64)))
				}
				out = append(out, with("_bucket", "le", "+Inf"), with("_sum", "", ""), with("_count", "", ""))
			case dto.MetricType_SUMMARY:
				for _, q := range m.GetSummary().GetQuantile() {
					out = append(out, with("", "quantile", strconv.FormatFloat(q.GetQuantile(), 'g', -1, 64)))
				}
				out = append(out, with("_sum", "", ""), with("_count", "", ""))
			default:
				out = append(out, with("", "", ""))
			}
		}
	}
	return out
}
