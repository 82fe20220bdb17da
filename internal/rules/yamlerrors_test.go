package rules

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A mistake in the rules file is reported in the writer's terms: the rule,
// the line, the unknown key with the one it likely misspells (or the valid
// keys), the form a value should have; never a Go type.
func TestParseExplainsMistakes(t *testing.T) {
	const rule = "rules:\n  - id: login\n    key: [ip]\n    algorithm: fixed_window\n    limits: [{requests: 5, per: 1s}]\n"
	tests := []struct {
		name, yaml string
		want       []string // the error's lines
	}{
		{"misspelt rule key", "rules:\n  - id: login\n    key: [ip]\n    algoritm: fixed_window\n    limits: [{requests: 5, per: 1s}]\n",
			[]string{`rule "login": line 4: unknown key "algoritm" (did you mean "algorithm"?)`}},
		{"misspelt top-level key", "rulez: []\n", []string{`line 1: unknown key "rulez" (did you mean "rules"?)`}},
		{"misspelt limit key", "rules:\n  - {id: a, key: [ip], algorithm: fixed_window, limits: [{requests: 1, pr: 1s}]}\n",
			[]string{`rule "a": line 2: unknown key "pr" (did you mean "per"?)`}},
		{"unknown key listed", rule + "    match: {paths: [/a]}\n",
			[]string{`rule "login": line 6: unknown key "paths" (valid keys: endpoints, methods, tiers)`}},
		{"detection key", "rules: []\ndetection: {warn: {violations: 1, withn: 1s}}\n",
			[]string{`line 2: unknown key "withn" (did you mean "within"?)`}},
		{"outcome scenario key (inline struct)", "rules: []\ndetection: {brute_force: {failure: 3, within: 1m, duration: 1h}}\n",
			[]string{`line 2: unknown key "failure" (did you mean "failures"?)`}},
		{"schedule daily key", rule + "    schedule: [{daily: {from: \"09:00\", to: \"17:00\", timezone: UTC}, limits: [{requests: 1, per: 1s}]}]\n",
			[]string{`rule "login": line 6: unknown key "timezone" (valid keys: from, to, tz)`}},
		{"two rules, two mistakes", rule + "    shadw: true\n  - id: b\n    priorty: 1\n",
			[]string{`rule "login": line 6: unknown key "shadw" (did you mean "shadow"?)`, `rule "b": line 8: unknown key "priorty" (did you mean "priority"?)`}},
		{"lease key", rule + "    lease: {max: 5}\n", []string{`rule "login": line 6: lease: unknown key "max" (did you mean "max_units"?)`}},
		{"integer", rule + "    priority: high\n", []string{`rule "login": line 6: priority: want an integer, got "high"`}},
		{"boolean", rule + "    shadow: maybe\n", []string{`rule "login": line 6: shadow: want true or false, got "maybe"`}},
		{"list", "rules:\n  - id: login\n    key: ip\n", []string{`rule "login": line 3: key: want a list, got "ip"`}},
		{"mapping for a list", "rules:\n  - id: login\n    limits: {requests: 5, per: 1s}\n", []string{`rule "login": line 3: limits: want a list, got a mapping`}},
		{"a rule not a mapping", "rules:\n  - login\n", []string{`rules[0]: line 2: want a mapping, got "login"`}},
		{"tier overrides", rule + "    tiers: {VIP: {requests: 1, per: 1s}}\n", []string{`rule "login": line 6: VIP: want a list, got a mapping`}},
		{"every bad duration, by its key", "rules:\n  - id: login\n    penalty: 5 minutes\n    limits: [{requests: 5, per: 1x}, {requests: 9, per: 1x}]\n",
			[]string{
				`rule "login": line 3: penalty: invalid duration "5 minutes" (want Go syntax such as 500ms, 10s, 5m, 1h)`,
				`rule "login": line 4: per: invalid duration "1x" (want Go syntax such as 500ms, 10s, 5m, 1h)`,
				`rule "login": line 4: per: invalid duration "1x" (want Go syntax such as 500ms, 10s, 5m, 1h)`,
			}},
		{"a time", rule + "    escalate: [{triggers: 1, within: 1s, penalty: 1s, from: tomorrow}]\n",
			[]string{`rule "login": line 6: from: invalid time "tomorrow" (want RFC 3339 such as 2026-11-27T00:00:00Z)`}},
		{"not a mapping", "- a\n", []string{`line 1: want a mapping, got a list`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml))
			if err == nil {
				t.Fatal("no error")
			}
			got := strings.Split(err.Error(), "\n")
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("got\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(tt.want, "\n  "))
			}
		})
	}
}

// The path of the file reaches the message.
func TestLoadFileNamesFileAndLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte("rules:\n  - id: login\n    algoritm: fixed_window\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := LoadFile(path)
	want := path + `: rule "login": line 3: unknown key "algoritm" (did you mean "algorithm"?)`
	if err == nil || err.Error() != want {
		t.Errorf("LoadFile = %v\nwant %s", err, want)
	}
	_, err = LoadSet(path, Options{})
	if err == nil || !strings.HasPrefix(err.Error(), "RULES_FILE: "+path+": ") || !strings.Contains(err.Error(), `line 3: unknown key "algoritm" (did you mean "algorithm"?)`) {
		t.Errorf("LoadSet = %v", err)
	}
}
