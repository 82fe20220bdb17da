package rulesync_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ratewarden/ratewarden/internal/rulesync"
	"github.com/ratewarden/ratewarden/internal/testkit"
)

// Dynamic rules that do not compile with the files' rules: the files win,
// at start and on a change of a file, and the refused version is tried
// again whenever a file changes. The store is memStore; the scenario is a
// rolling deploy, where a dynamic rule written against the new rules file
// meets a limiter still on the old one.

// legacyKeyFile is fileRules with a descriptor rule on edge's api_key: the
// old rules file of the deploy.
const legacyKeyFile = fileRules + `
  - id: legacy-key
    descriptor: {domain: edge, entries: [{key: api_key}]}
    algorithm: fixed_window
    limits: [{requests: 1000, per: 1h}]
`

// apiKeyRule is the dynamic rule written against the new file (fileRules):
// the same descriptor as legacy-key, so the two cannot run together.
const apiKeyRule = `{"id": "api-key", "descriptor": {"domain": "edge", "entries": [{"key": "api_key"}]},
	"algorithm": "sliding_window", "limits": [{"requests": 2, "per": "1h"}]}`

// withStore gives the Manager store as its rule store, polled every poll.
func withStore(store *memStore, poll time.Duration) option {
	return func(c *rulesync.Config) {
		c.Connect = func(context.Context) (rulesync.Store, error) { return store, nil }
		c.StorePoll = poll
	}
}

// withRulesFile writes content as the Manager's rules file.
func withRulesFile(t *testing.T, content string) option {
	return func(c *rulesync.Config) { writeFile(t, c.File, content) }
}

// storeWith returns a memStore holding the rules (id, JSON), one version
// each.
func storeWith(t *testing.T, rs ...string) *memStore {
	t.Helper()
	s := &memStore{rules: map[string]rulesync.StoredRule{}}
	for i := 0; i+1 < len(rs); i += 2 {
		s.put(t, rs[i], rs[i+1])
	}
	return s
}

// checkRefused fails the test unless the view shows version refused, for
// the rule atFault, with the error naming want.
func checkRefused(t *testing.T, v *rulesync.View, version int64, atFault, want string) {
	t.Helper()
	r := v.DynamicRefused
	if r == nil {
		t.Fatalf("no refusal in the view (version %s)", v.Version)
	}
	if r.Version != version || !slices.Equal(r.Rules, []string{atFault}) || r.Err == nil ||
		!strings.Contains(r.Err.Error(), want) || r.At.IsZero() {
		t.Fatalf("refusal %+v; want version %d, rules [%s], an error naming %q", *r, version, atFault, want)
	}
}

// runsDynamic reports whether l runs the dynamic rule api-key of version
// 1, refusing nothing.
func runsDynamic(l *rlsLimiter) bool {
	v := l.View()
	return l.limit("api-key") == 2 && l.limit("legacy-key") == -1 && v.DynamicVersion == 1 && v.DynamicRefused == nil
}

// A limiter whose rules file conflicts with the stored dynamic rules starts
// on the file's rules, refusing the dynamic version (logged with the rule
// at fault, counted, in the view); when the file changes into one the
// dynamic rules fit, they apply at once, without a poll of the store.
func TestStartRefusesConflictingDynamicRules(t *testing.T) {
	store := storeWith(t, "api-key", apiKeyRule)
	l, err := newRLS(t, "", withStore(store, time.Hour), withRulesFile(t, legacyKeyFile))
	if err != nil {
		t.Fatalf("start with dynamic rules that conflict with the file: %v; want the file's rules running", err)
	}
	if l.limit("legacy-key") != 1000 || l.limit("api-key") != -1 || l.limit("login") != 100 {
		t.Fatalf("rules in force: legacy-key %d, api-key %d, login %d; want the file's alone",
			l.limit("legacy-key"), l.limit("api-key"), l.limit("login"))
	}
	v := l.View()
	if v.DynamicVersion != 0 {
		t.Errorf("dynamic version in force %d, want 0", v.DynamicVersion)
	}
	checkRefused(t, v, 1, "api-key", "duplicate descriptor")
	metric := func(result string) float64 {
		return testutil.ToFloat64(l.ReloadsMetric(rulesync.SourceDynamic, result))
	}
	if metric("failure") != 1 || metric("success") != 0 ||
		testutil.ToFloat64(l.LastReloadSuccessfulMetric(rulesync.SourceDynamic)) != 0 {
		t.Errorf("dynamic loads: %v failed, %v succeeded; want 1 and 0, last successful 0", metric("failure"), metric("success"))
	}
	logged := l.logs.FilterMessage("dynamic rules refused").All()
	if len(logged) != 1 {
		t.Fatalf("%d refusals logged, want 1", len(logged))
	}
	fields := logged[0].ContextMap()
	if fields["version"] != int64(1) || !strings.Contains(fields["error"].(string), "duplicate descriptor") ||
		!slices.Equal(fields["rules"].([]any), []any{"api-key"}) {
		t.Errorf("refusal logged with %v; want version 1, rules [api-key] and the error", fields)
	}

	l.run(t, nil)
	writeFile(t, l.View().File, fileRules) // the new file reaches this limiter
	testkit.WaitFor(t, 2*time.Second, "the refused dynamic rules to apply with the new file", func() bool { return runsDynamic(l) })
	if metric("success") != 1 || testutil.ToFloat64(l.LastReloadSuccessfulMetric(rulesync.SourceDynamic)) != 1 {
		t.Errorf("dynamic loads succeeded %v, want 1, last successful 1", metric("success"))
	}
}

// A running limiter that refused a dynamic version, its poll seeing it,
// tries it again when its rules file changes, though the store's version
// does not move.
func TestFileChangeRetriesRefusedVersion(t *testing.T) {
	store := storeWith(t)
	l := startRLS(t, "", withStore(store, 20*time.Millisecond), withRulesFile(t, legacyKeyFile))
	l.run(t, nil)
	store.put(t, "api-key", apiKeyRule) // as a limiter on the new file would
	testkit.WaitFor(t, 2*time.Second, "the conflicting version to be refused", func() bool {
		return testutil.ToFloat64(l.ReloadsMetric(rulesync.SourceDynamic, "failure")) == 1
	})
	checkRefused(t, l.View(), 1, "api-key", "duplicate descriptor")
	if l.limit("legacy-key") != 1000 || l.limit("api-key") != -1 {
		t.Fatal("a refused version changed the rules in force")
	}
	time.Sleep(100 * time.Millisecond) // polls of the same version
	if n := testutil.ToFloat64(l.ReloadsMetric(rulesync.SourceDynamic, "failure")); n != 1 {
		t.Fatalf("the refused version was tried %v times without a change; want once", n)
	}

	writeFile(t, l.View().File, fileRules)
	testkit.WaitFor(t, 2*time.Second, "the refused version to apply with the new file", func() bool { return runsDynamic(l) })
}

// A running limiter whose rules file changes into one the dynamic rules in
// force do not fit takes the file, as a restart would, and refuses the
// dynamic version; the file changing back brings the dynamic rules back.
func TestChangedFileWinsOverDynamicRules(t *testing.T) {
	store := storeWith(t, "api-key", apiKeyRule)
	l := startRLS(t, "", withStore(store, time.Hour))
	if !runsDynamic(l) {
		t.Fatalf("the dynamic rule is not in force at start: %+v", l.View())
	}
	l.run(t, nil)
	writeFile(t, l.View().File, legacyKeyFile)
	testkit.WaitFor(t, 2*time.Second, "the conflicting file to apply", func() bool { return l.limit("legacy-key") == 1000 })
	v := l.View()
	if l.limit("api-key") != -1 || v.DynamicVersion != 0 {
		t.Fatalf("api-key %d, dynamic version %d with the conflicting file; want the file's rules alone", l.limit("api-key"), v.DynamicVersion)
	}
	checkRefused(t, v, 1, "api-key", "duplicate descriptor")
	if n := testutil.ToFloat64(l.ReloadsMetric(rulesync.SourceFile, "failure")); n != 0 {
		t.Errorf("file refusals %v, want 0: the file is valid", n)
	}

	writeFile(t, l.View().File, fileRules)
	testkit.WaitFor(t, 2*time.Second, "the dynamic rules to come back", func() bool { return runsDynamic(l) })
}

// The same holds for the RLS directory: a limiter starts on it when the
// dynamic rules conflict with it, and tries them again when it changes.
func TestRLSChangeRetriesRefusedVersion(t *testing.T) {
	const sms = `{"id": "sms", "descriptor": {"domain": "messaging", "entries": [{"key": "to_number"}]},
		"algorithm": "fixed_window", "limits": [{"requests": 3, "per": "1h"}]}`
	store := storeWith(t, "sms", sms)
	l, err := newRLS(t, messagingConfig, withStore(store, time.Hour))
	if err != nil {
		t.Fatalf("start with dynamic rules that conflict with the directory: %v", err)
	}
	if l.limit(toNumber) != 100 || l.limit("sms") != -1 {
		t.Fatalf("%s %d, sms %d; want the directory's rule alone", toNumber, l.limit(toNumber), l.limit("sms"))
	}
	checkRefused(t, l.View(), 1, "sms", "duplicate descriptor")

	l.run(t, nil)
	withoutToNumber := messagingConfig[:strings.Index(messagingConfig, "  - key: to_number\n    rate_limit: {unit: day, requests_per_unit: 100}")]
	writeFile(t, filepath.Join(l.dir, "config.yaml"), withoutToNumber)
	testkit.WaitFor(t, 2*time.Second, "the refused rule to apply with the new directory", func() bool {
		v := l.View()
		return l.limit("sms") == 3 && l.limit(toNumber) == -1 && v.DynamicVersion == 1 && v.DynamicRefused == nil
	})
}

// Files that are invalid alone still stop the start, whatever the store
// holds: there is nothing to run.
func TestStartFailsOnInvalidFileWithDynamicRules(t *testing.T) {
	store := storeWith(t, "api-key", apiKeyRule)
	_, err := newRLS(t, "", withStore(store, time.Hour),
		withRulesFile(t, strings.Replace(legacyKeyFile, "fixed_window", "fixed_windw", 1)))
	if err == nil || !strings.Contains(err.Error(), "RULES_FILE") || !strings.Contains(err.Error(), "algorithm") {
		t.Fatalf("start with an invalid file: %v; want the file's error", err)
	}
}
