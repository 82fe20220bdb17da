package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Fixtures of the rules check. The example file is the one operators copy,
// so it must always pass.
const (
	rulesExamplePath      = "../../deploy/rules.example.yaml"
	rulesFullPath         = "testdata/rules/full.yaml"
	rulesInvalidPath      = "testdata/rules/invalid.yaml"
	rulesUnknownFieldPath = "testdata/rules/unknown-field.yaml"
	rulesMisspeltPath     = "testdata/rules/misspelt-key.yaml"
	rlsMisspeltDir        = "testdata/rls/misspelt"
	rlsValidDir           = "testdata/rls/valid"
	rlsInvalidDir         = "testdata/rls/invalid"
)

// runRulesCommand runs rulesCommand and returns its exit status and output.
func runRulesCommand(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut strings.Builder
	code = rulesCommand(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// rulesCheckContains fails for every want missing from got.
func rulesCheckContains(t *testing.T, stream, got string, wants []string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("%s does not contain %q:\n%s", stream, w, got)
		}
	}
}

// writeTempRules writes content to a rules file in a fresh temporary directory
// and returns its path.
func writeTempRules(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Usage errors exit 2 with the usage on stderr; help exits 0 with the usage
// on stdout.
func TestRulesCommandUsage(t *testing.T) {
	const usage = "usage: limiter rules check [--rls-dir DIR]... [FILE...]"
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStdout []string // empty: stdout must be empty
		wantStderr []string // empty: stderr must be empty
	}{
		{name: "no subcommand", args: nil, wantCode: 2,
			wantStderr: []string{"limiter rules: no subcommand given", usage}},
		{name: "unknown subcommand", args: []string{"lint", "a.yaml"}, wantCode: 2,
			wantStderr: []string{`limiter rules: unknown subcommand "lint"`, usage}},
		{name: "no file", args: []string{"check"}, wantCode: 2,
			wantStderr: []string{"limiter rules: check: no file or --rls-dir given", usage}},
		{name: "rls-dir without a directory", args: []string{"check", "--rls-dir"}, wantCode: 2,
			wantStderr: []string{"limiter rules: check: --rls-dir needs a directory", usage}},
		{name: "rls-dir= without a directory", args: []string{"check", rulesFullPath, "--rls-dir="}, wantCode: 2,
			wantStderr: []string{"limiter rules: check: --rls-dir needs a directory", usage}},
		{name: "help documents rls-dir", args: []string{"--help"}, wantCode: 0, wantStdout: []string{"--rls-dir DIR", "RLS_CONFIG_DIR"}},
		{name: "unknown flag", args: []string{"check", "--strict", rulesFullPath}, wantCode: 2,
			wantStderr: []string{`check: unknown flag "--strict"`, usage}},
		{name: "help flag", args: []string{"--help"}, wantCode: 0, wantStdout: []string{usage, "Exit status"}},
		{name: "short help flag", args: []string{"-h"}, wantCode: 0, wantStdout: []string{usage}},
		{name: "help subcommand", args: []string{"help"}, wantCode: 0, wantStdout: []string{usage}},
		{name: "check help", args: []string{"check", "-h"}, wantCode: 0, wantStdout: []string{usage}},
		// Help wins over the files: nothing is checked.
		{name: "help after a file", args: []string{"check", rulesInvalidPath, "--help"}, wantCode: 0, wantStdout: []string{usage}},
		// After "--" a dash is part of a file name, not a flag.
		{name: "double dash", args: []string{"check", "--", "-h"}, wantCode: 1,
			wantStderr: []string{"-h: FAILED", "open -h:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runRulesCommand(t, tt.args...)
			if code != tt.wantCode {
				t.Errorf("exit status %d, want %d", code, tt.wantCode)
			}
			if len(tt.wantStdout) == 0 && stdout != "" {
				t.Errorf("unexpected stdout:\n%s", stdout)
			}
			if len(tt.wantStderr) == 0 && stderr != "" {
				t.Errorf("unexpected stderr:\n%s", stderr)
			}
			rulesCheckContains(t, "stdout", stdout, tt.wantStdout)
			rulesCheckContains(t, "stderr", stderr, tt.wantStderr)
		})
	}
}

// The report of a file using every feature is pinned exactly: it is what CI
// logs show, and it must not depend on map order.
func TestRulesCommandReport(t *testing.T) {
	const want = `Checking testdata/rules/full.yaml
  SUCCESS: 5 rules found

api-keys (priority 50, sliding_window, shadow)
  shadow:    reports only, never denies
  matches:   GET, POST requests to /api/**; tiers FREE, pro
  key:       attr:app_key, user_id (requests without attr:app_key or user_id are not limited by this rule)
  limits:    10 per 1s; 1 per 1h30m
             tier FREE: 5 per 1s
             tier pro: 20 per 1s
  penalty:   1h30m
  schedule:  while an entry is active (the first one wins), its limits and tier overrides replace the rule's
             from 2026-11-27T00:00:00Z to 2026-11-28T00:00:00+01:00: 2 per 1s; penalty 15m
               tier pro: 4 per 1s
             daily 22:00-06:00 Europe/Paris: 3 per 500ms
             daily 12:00-24:00 UTC: 8 per 1s
  escalate:  after 1 denial within 10m, denied for 30m
             after 10 denials within 1h, denied for 24h (from 2026-11-27T00:00:00Z to 2026-12-01T00:00:00Z)
             after 20 denials within 1h, denied for 48h (from 2026-11-27T00:00:00Z)
  debit:     always: every call's cost counts, denied or not; usage may pass the limit, and calls are denied while it does
  on Redis failure: deny
uploads (priority 50, token_bucket)
  matches:   requests of any method to /upload; any tier
  key:       tier, endpoint (requests without tier are not limited by this rule)
  limits:    1 token per 1s, burst 1; 100 tokens per 1h, burst 20
  on Redis failure: local
per-address (priority 60, fixed_window)
  matches:   requests of any method to /login; any tier
  key:       endpoint, ip
  ipv6:      every address on its own (no grouping)
  limits:    5 per 1m
  on Redis failure: local
exports (priority 70, concurrency)
  matches:   POST requests to /api/exports/**; any tier
  key:       attr:customer (requests without attr:customer are not limited by this rule)
  limits:    5 in flight at once, a hold nobody releases lapsing after 10m
             tier VIP: 50 in flight at once, a hold nobody releases lapsing after 1m
  on Redis failure: local
zz-catch-all (priority 100, fixed_window)
  matches:   requests of any method to any endpoint; any tier
  key:       ip
  ipv6:      the addresses of one /48 share the limits
  limits:    1000 per 1m
  on Redis failure: allow
exempt: users ops-bot
detection: warn after 20 violations in 5m; no violation bans; scan ban 2h after 1 distinct endpoint in 30s; credential stuffing ban 1h after more than 10 users failing from one source in 10m (failures: status 401, 403); brute force ban 1h after more than 20 failures from one source in 5m (failures: status 401, 403); account attack ban 1h after more than 10 networks (IPv4 /32, IPv6 /48) failing on one account (each source banned but those that got a 2xx on it) in 10m (failures: status 401, 403); probing ban 1h after more than 20 distinct endpoints failing for one source in 1m (failures: status 404); IPv6 offenders: the addresses of one /56 are one offender, banned together; dry run (bans are published, not enforced)
`
	for range 3 { // map iteration order differs between runs
		code, stdout, stderr := runRulesCommand(t, "check", rulesFullPath)
		if code != 0 || stderr != "" {
			t.Fatalf("exit status %d, stderr:\n%s", code, stderr)
		}
		if stdout != want {
			t.Fatalf("report:\n%s\nwant:\n%s", stdout, want)
		}
	}
}

// The shipped example passes, and its rules are described in evaluation
// order.
func TestRulesCommandExampleFile(t *testing.T) {
	code, stdout, stderr := runRulesCommand(t, "check", rulesExamplePath)
	if code != 0 || stderr != "" {
		t.Fatalf("exit status %d, stderr:\n%s", code, stderr)
	}
	rulesCheckContains(t, "stdout", stdout, []string{
		"Checking " + rulesExamplePath + "\n  SUCCESS: 3 rules found\n",
		"login-per-ip (priority 10, sliding_window)",
		"  matches:   POST requests to /api/login, /api/auth/**; any tier\n",
		"  limits:    5 per 1s; 100 per 1m\n",
		"  ipv6:      the addresses of one /64 share the limits\n",
		"books-by-tier (priority 100, token_bucket)",
		"  key:       user_id (requests without user_id are not limited by this rule)\n",
		"             tier VIP: 5 tokens per 1s, burst 50\n",
		"exempt: tiers SUPER_ADMIN; ips 10.0.0.0/8; endpoints /healthz\n",
		"detection: warn after 20 violations in 5m;",
		"login-failures (priority 100, sliding_window)",
		"  spent by:  reports (POST /v1/report) of status 401, 403, by their cost, fitting or not; checks spend nothing and are refused once no unit is left\n",
		"credential stuffing ban 1h after more than 10 users failing from one source in 10m (failures: status 401, 403);",
		"probing ban 1h after more than 20 distinct endpoints failing for one source in 1m (failures: status 404);",
	})
	// Evaluation order: priority 10 before the default 100.
	if i, j := strings.Index(stdout, "login-per-ip ("), strings.Index(stdout, "books-by-tier ("); i < 0 || j < i {
		t.Errorf("rules not in evaluation order:\n%s", stdout)
	}
}

// An invalid or unreadable file exits 1 and is reported on stderr with the
// file, the rule and the field at fault.
func TestRulesCommandInvalidFiles(t *testing.T) {
	tests := []struct {
		name       string
		path       string // a fixture; empty: content in a temporary file
		content    string
		wantStderr []string
	}{
		{name: "bad algorithm and duplicate id", path: rulesInvalidPath, wantStderr: []string{
			rulesInvalidPath + ": FAILED\n",
			// Every problem, one per line, without the path repeated.
			"\n  rule \"login\": algorithm: unknown \"leaky\" (want fixed_window, sliding_window, sliding_window_counter, token_bucket or concurrency)\n",
			"\n  rule \"login\": id: duplicate (also rules[0])\n",
			"\n  rule \"login\": limits[0].per: must be at least 1ms\n",
		}},
		{name: "unknown field", path: rulesUnknownFieldPath, wantStderr: []string{
			rulesUnknownFieldPath + ": FAILED\n",
			// The decoder only gives the line: the check names the rule.
			"\n  rule \"search\": line 11: unknown key \"penalti\" (did you mean \"penalty\"?)\n",
		}},
		{name: "bad duration", content: "rules:\n  - id: a\n    key: [ip]\n    algorithm: fixed_window\n    limits: [{requests: 1, per: 1x}]\n",
			wantStderr: []string{`  rule "a": line 5: per: invalid duration "1x"`}},
		{name: "rule without id", content: "rules:\n  - key: [ip]\n    algorithm: fixed_window\n    limits: [{requests: 1, per: 1s}]\n",
			wantStderr: []string{"  rules[0].id: required\n"}},
		{name: "empty file", content: "", wantStderr: []string{`rules file is empty (write "rules: []" for no rules)`}},
		{name: "missing file", path: "testdata/rules/no-such-file.yaml", wantStderr: []string{
			"testdata/rules/no-such-file.yaml: FAILED\n",
			"  open testdata/rules/no-such-file.yaml: ", // then the system's reason
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := tt.path
			if path == "" {
				path = writeTempRules(t, tt.content)
			}
			code, stdout, stderr := runRulesCommand(t, "check", path)
			if code != 1 {
				t.Errorf("exit status %d, want 1", code)
			}
			if stdout != "" {
				t.Errorf("unexpected stdout:\n%s", stdout)
			}
			rulesCheckContains(t, "stderr", stderr, append([]string{path + ": FAILED\n"}, tt.wantStderr...))
		})
	}
}

// A misspelt key is reported exactly: the file, then the rule, the line,
// the key and the key meant, in the writer's terms. The same holds for a
// directory of envoyproxy/ratelimit configuration files.
func TestRulesCommandMisspeltKey(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"rules file", []string{"check", rulesMisspeltPath}, rulesMisspeltPath + ": FAILED\n" +
			`  rule "login": line 5: unknown key "algoritm" (did you mean "algorithm"?)` + "\n"},
		{"RLS directory", []string{"check", "--rls-dir", rlsMisspeltDir}, rlsMisspeltDir + ": FAILED\n" +
			`  config.yaml: domain messaging: descriptor to_number: line 5: unknown key "shadow_mod" (did you mean "shadow_mode"?)` + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runRulesCommand(t, tt.args...)
			if code != 1 || stdout != "" {
				t.Errorf("exit status %d, stdout:\n%s", code, stdout)
			}
			if stderr != tt.want {
				t.Errorf("stderr:\n%s\nwant:\n%s", stderr, tt.want)
			}
		})
	}
}

// A failure does not stop the check: every file is reported, and the exit
// status says that one failed.
func TestRulesCommandChecksEveryFile(t *testing.T) {
	code, stdout, stderr := runRulesCommand(t, "check", rulesExamplePath, rulesInvalidPath, rulesFullPath)
	if code != 1 {
		t.Errorf("exit status %d, want 1", code)
	}
	rulesCheckContains(t, "stdout", stdout, []string{
		"Checking " + rulesExamplePath + "\n",
		// Reports of successive files are separated by a blank line.
		"\n\nChecking " + rulesFullPath + "\n  SUCCESS: 5 rules found\n",
	})
	rulesCheckContains(t, "stderr", stderr, []string{rulesInvalidPath + ": FAILED\n", `rule "login": algorithm`})
	if strings.Contains(stderr, rulesExamplePath) || strings.Contains(stdout, rulesInvalidPath) {
		t.Errorf("a file is reported on the wrong stream:\nstdout:\n%s\nstderr:\n%s", stdout, stderr)
	}

	code, _, _ = runRulesCommand(t, "check", rulesExamplePath, rulesFullPath)
	if code != 0 {
		t.Errorf("two valid files: exit status %d, want 0", code)
	}
}

// The report of an RLS directory using every feature is pinned exactly:
// descriptor rules in evaluation order with their domain (and file), path,
// flags and limits, then the domains. Dotfiles are not read.
func TestRulesCommandRLSReport(t *testing.T) {
	const want = `Checking testdata/rls/valid (RLS config)
  SUCCESS: 7 descriptor rules found in 2 files

rls.api.llm_key (priority 100, fixed_window)
  domain:    api (api.yml)
  path:      llm_key
  limits:    100000 per 1h
  reserve:   a request-time descriptor (hits_addend 0) reserves 4096 units, admitted only if they fit, until the stream-done descriptor ending in (hold, <id answered>) settles them with its hits_addend; one nobody settles lapses after 5m, spent
  on Redis failure: local
rls.api.path__api__ (priority 100, token_bucket, shadow)
  shadow:    reports only, never denies
  domain:    api (api.yml)
  path:      path_/api/*
  flags:     share_threshold on path (the values matching /api/* count as one); value_to_metric on path
  limits:    10 tokens per 1s, burst 50
  penalty:   1m
  on Redis failure: deny
rls.api.upload (priority 100, concurrency)
  domain:    api (api.yml)
  path:      upload
  release:   oldest (one naming no hold id releases the key's oldest hold)
  limits:    4 in flight at once, a hold nobody releases lapsing after 2m
  on Redis failure: local
rls.messaging.internal (priority 100, fixed_window)
  domain:    messaging (messaging.yaml)
  path:      internal
  limits:    unlimited (answered OK without Redis)
rls.messaging.message_type_marketing.to_number (priority 100, fixed_window)
  domain:    messaging (messaging.yaml)
  path:      message_type_marketing.to_number
  name:      marketing
  limits:    5 per 24h
  on Redis failure: local
rls.messaging.remote_address_50.0.0.5 (priority 100, fixed_window)
  domain:    messaging (messaging.yaml)
  path:      remote_address_50.0.0.5
  limits:    0 per 1s (denies every request, without Redis)
rls.messaging.to_number (priority 100, fixed_window)
  domain:    messaging (messaging.yaml)
  path:      to_number
  replaces:  marketing (not applied when this rule matches too)
  flags:     detailed_metric on to_number
  limits:    100 per 2h
  on Redis failure: local
domains: api (api.yml, 3 rules); messaging (messaging.yaml, 4 rules)
`
	for _, args := range [][]string{{"check", "--rls-dir", rlsValidDir}, {"check", "--rls-dir=" + rlsValidDir}} {
		code, stdout, stderr := runRulesCommand(t, args...)
		if code != 0 || stderr != "" {
			t.Fatalf("%q: exit status %d, stderr:\n%s", args, code, stderr)
		}
		if stdout != want {
			t.Fatalf("%q: report:\n%s\nwant:\n%s", args, stdout, want)
		}
	}
}

// An invalid or missing directory exits 1 and is reported on stderr with
// every problem: file, domain, descriptor path.
func TestRulesCommandRLSInvalid(t *testing.T) {
	tests := []struct {
		name, dir  string
		wantStderr []string
	}{
		{"invalid", rlsInvalidDir, []string{
			rlsInvalidDir + ": FAILED\n",
			"\n  a.yaml: domain messaging: descriptor message_type_marketing.to_number: rate_limit: unknown unit \"fortnight\" (want second, minute, hour, day, week, month or year)\n",
			"\n  b.yaml: domain messaging: duplicate domain (also in a.yaml)\n",
		}},
		{"missing", "testdata/rls/no-such-dir", []string{"testdata/rls/no-such-dir: FAILED\n", "  open testdata/rls/no-such-dir: "}},
		{"a file", rulesFullPath, []string{rulesFullPath + ": FAILED\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runRulesCommand(t, "check", "--rls-dir", tt.dir)
			if code != 1 || stdout != "" {
				t.Errorf("exit status %d, stdout:\n%s", code, stdout)
			}
			rulesCheckContains(t, "stderr", stderr, tt.wantStderr)
		})
	}
}

// Rules files and directories are checked in the order given, each on its
// own; a descriptor rule of a rules file is described by its domain and
// path.
func TestRulesCommandFilesAndDirs(t *testing.T) {
	file := writeTempRules(t, `rules:
  - id: envoy-users
    algorithm: fixed_window
    limits: [{requests: 10, per: 1s}]
    descriptor: {domain: edge, entries: [{key: user}]}
`)
	code, stdout, stderr := runRulesCommand(t, "check", file, "--rls-dir", rlsValidDir, rulesExamplePath)
	if code != 0 || stderr != "" {
		t.Fatalf("exit status %d, stderr:\n%s", code, stderr)
	}
	rulesCheckContains(t, "stdout", stdout, []string{
		"envoy-users (priority 100, fixed_window)\n  domain:    edge\n  path:      user\n  limits:    10 per 1s\n",
		"\n\nChecking " + rlsValidDir + " (RLS config)\n",
		"\n\nChecking " + rulesExamplePath + "\n",
	})
	if i, j, k := strings.Index(stdout, file), strings.Index(stdout, rlsValidDir), strings.Index(stdout, rulesExamplePath); i < 0 || j < i || k < j {
		t.Errorf("not in the order given:\n%s", stdout)
	}
	if strings.Contains(stdout, "matches:   requests of any method") {
		t.Errorf("a descriptor rule is described as a rule of /v1/check:\n%s", stdout)
	}

	code, _, stderr = runRulesCommand(t, "check", "--rls-dir", rlsInvalidDir, rulesExamplePath)
	if code != 1 || !strings.Contains(stderr, rlsInvalidDir+": FAILED") {
		t.Errorf("an invalid directory among valid files: exit status %d, stderr:\n%s", code, stderr)
	}
}
