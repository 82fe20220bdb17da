package deploy_test

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// Every metric family the services register is named in
// docs/monitoring.md, in backquotes: the rate_limit_ families one by one
// (a name alone or with its labels, `name{label}`), the Go runtime's and
// the process's collectors by their prefix (`go_*`, `process_*`), which
// client_golang defines.
func TestMonitoringDocNamesEveryMetric(t *testing.T) {
	raw, err := os.ReadFile("../docs/monitoring.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	var missing, prefixes []string
	for name := range obsRegisteredMetrics(t) {
		if strings.HasPrefix(name, "rate_limit_") {
			if !strings.Contains(doc, "`"+name+"`") && !strings.Contains(doc, "`"+name+"{") {
				missing = append(missing, name)
			}
			continue
		}
		prefix, _, _ := strings.Cut(name, "_")
		if !slices.Contains(prefixes, prefix) {
			prefixes = append(prefixes, prefix)
		}
	}
	slices.Sort(missing)
	for _, name := range missing {
		t.Errorf("docs/monitoring.md does not name %s: add a line (what it counts, its labels)", name)
	}
	for _, prefix := range prefixes {
		if !strings.Contains(doc, "`"+prefix+"_*`") {
			t.Errorf("docs/monitoring.md does not name the %s_ families (`%s_*`)", prefix, prefix)
		}
	}
}
