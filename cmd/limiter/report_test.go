package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Durations drop their zero units, as they are written in rules files.
func TestReportDuration(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{500 * time.Millisecond, "500ms"},
		{10 * time.Second, "10s"},
		{5 * time.Minute, "5m"},
		{90 * time.Second, "1m30s"},
		{time.Hour, "1h"},
		{90 * time.Minute, "1h30m"},
		{time.Hour + time.Second, "1h1s"},
		{48 * time.Hour, "48h"},
	}
	for _, tt := range tests {
		if got := reportDuration(tt.d); got != tt.want {
			t.Errorf("reportDuration(%v) = %q, want %q", tt.d, got, tt.want)
		}
	}
}

// The description of a leased rule says how much a limiter holds.
func TestRulesReportLease(t *testing.T) {
	path := writeTempRules(t, `rules:
  - {id: hot, key: [ip], algorithm: fixed_window, limits: [{requests: 6400, per: 1m}], lease: true}
  - {id: sized, key: [ip], algorithm: token_bucket, limits: [{rate: 1, per: 1s, burst: 10}], lease: {max_units: 1}}
  - {id: plain, key: [ip], algorithm: fixed_window, limits: [{requests: 1, per: 1s}]}
`)
	code, stdout, stderr := runRulesCommand(t, "check", path)
	if code != rulesExitOK {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	for id, want := range map[string]string{
		"hot":   "  lease:     each limiter holds up to 1/64 of the smallest quota in force, at least 1 (100 units of the limits above), and answers from memory\n",
		"sized": "  lease:     each limiter holds up to 1 unit of a key and answers from memory\n",
		"plain": "",
	} {
		_, rest, _ := strings.Cut(stdout, "\n"+id+" (")
		got, _, _ := strings.Cut(rest, "on Redis failure:")
		if got == "" || want == "" && strings.Contains(got, "lease:") || !strings.Contains(got, want) {
			t.Errorf("%s:\n%s\nwant the line %q", id, got, want)
		}
	}
}

// The description of a rule that reserves says what a check reserves and
// how long; a rule spent by reports that does not reserve says none.
func TestRulesReportReserve(t *testing.T) {
	path := writeTempRules(t, `rules:
  - {id: llm, key: [ip], algorithm: fixed_window, limits: [{requests: 1000, per: 1h}], spent_by: report, reserve: 100, reserve_hold: 2m}
  - {id: failures, key: [ip], algorithm: fixed_window, limits: [{requests: 5, per: 1m}], spent_by: report}
`)
	code, stdout, stderr := runRulesCommand(t, "check", path)
	if code != rulesExitOK {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	for id, want := range map[string]string{
		"llm":      "each check reserves 100 units (or its own reserve), admitted only if they fit, until its report settles them; one nobody settles lapses after 2m, spent",
		"failures": "",
	} {
		_, rest, _ := strings.Cut(stdout, "\n"+id+" (")
		got, _, _ := strings.Cut(rest, "on Redis failure:")
		if got == "" || want == "" && strings.Contains(got, "reserve:") || !strings.Contains(got, want) {
			t.Errorf("%s:\n%s\nwant %q", id, got, want)
		}
	}
}

// The report of an RLS directory lists the keys loaded but not used, as
// envoyproxy/ratelimit loads them.
func TestRulesCommandRLSWarnings(t *testing.T) {
	dir := t.TempDir()
	const file = `domain: edge
name: ignored-at-the-top
descriptors:
  - key: api
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 10}
`
	if err := os.WriteFile(filepath.Join(dir, "erl.yaml"), []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runRulesCommand(t, "check", "--rls-dir", dir)
	if code != rulesExitOK {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	rulesCheckContains(t, "stdout", stdout, []string{
		"warnings: 2 keys not used (loaded as envoyproxy/ratelimit loads them)\n" +
			"  erl.yaml: line 2: domain edge: name: ignored here, as envoyproxy/ratelimit ignores it (read under rate_limit)\n" +
			"  erl.yaml: line 5: domain edge: descriptor api: quota_mode: not applied: answered as without it\n",
	})
}
