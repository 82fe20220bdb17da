package rulesync

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/rules"
)

// The merger alone, without files, store or clock: the snapshots the
// sources hand it, and the refusal policy of the package doc.

const (
	// mergeFileFits has one rule, which the dynamic rule api-key
	// (apiKeyAt) fits.
	mergeFileFits = `
rules:
  - id: login
    match: {endpoints: ["/login"]}
    key: [ip]
    algorithm: fixed_window
    limits: [{requests: 100, per: 1m}]
`
	// mergeFile adds a descriptor rule on edge's api_key, which api-key
	// cannot run beside.
	mergeFile = mergeFileFits + `
  - id: legacy-key
    descriptor: {domain: edge, entries: [{key: api_key}]}
    algorithm: fixed_window
    limits: [{requests: 1000, per: 1h}]
`
)

// testMerger is a merger whose applied sets are counted.
type testMerger struct {
	*merger
	applies int
	set     *rules.Set
}

func newTestMerger(t *testing.T) *testMerger {
	t.Helper()
	tm := &testMerger{}
	cfg := &Config{File: "rules.yaml", Log: zap.NewNop(), Now: time.Now,
		Apply: func(s *rules.Set) { tm.applies++; tm.set = s }}
	tm.merger = &merger{cfg: cfg, metrics: newMetrics(prometheus.NewRegistry(), true, false), retry: make(chan struct{}, 1)}
	return tm
}

func fileOf(t *testing.T, content string) *fileRules {
	t.Helper()
	f, err := rules.Parse([]byte(content))
	if err != nil {
		t.Fatal(err)
	}
	return &fileRules{parsed: f, hash: hashOf([]byte(content))}
}

// apiKeyAt is version of the dynamic rules holding api-key alone.
func apiKeyAt(t *testing.T, version int64) *dynamicRules {
	t.Helper()
	r, err := rules.ParseRuleJSON([]byte(`{"id": "api-key", "descriptor": {"domain": "edge", "entries": [{"key": "api_key"}]},
		"algorithm": "sliding_window", "limits": [{"requests": 2, "per": "1h"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	return &dynamicRules{version: version, rules: []dynamicRule{{rule: r, stored: StoredRule{ID: r.ID, Version: version}}}}
}

// retried reports whether the merger asked for a retry of the dynamic rules
// since the last call.
func (tm *testMerger) retried() bool {
	select {
	case <-tm.retry:
		return true
	default:
		return false
	}
}

// check fails the test unless the rules in force are the dynamic version
// inForce with api-key in force or not, refusing version refused (0: none).
func (tm *testMerger) check(t *testing.T, inForce int64, apiKey bool, refused int64) {
	t.Helper()
	v := tm.View()
	if v.Set != tm.set {
		t.Fatal("the view's set is not the set applied")
	}
	if v.DynamicVersion != inForce || (tm.set.Rule("api-key") != nil) != apiKey {
		t.Fatalf("dynamic version %d in force, api-key %v; want %d, %v", v.DynamicVersion, tm.set.Rule("api-key") != nil, inForce, apiKey)
	}
	got := int64(0)
	if v.DynamicRefused != nil {
		got = v.DynamicRefused.Version
	}
	if got != refused {
		t.Fatalf("refused version %d, want %d", got, refused)
	}
}

// The files win at start and on a change; a refused version is skipped
// until a file changes or the version moves; a version that does not fit
// leaves the one in force.
func TestMergerRefusalPolicy(t *testing.T) {
	tm := newTestMerger(t)
	if err := tm.start(fileOf(t, mergeFile), nil, apiKeyAt(t, 1)); err != nil {
		t.Fatal(err)
	}
	tm.check(t, 0, false, 1)
	if tm.wants(1) || !tm.wants(2) {
		t.Fatalf("wants(1) %v, wants(2) %v after refusing 1; want false, true", tm.wants(1), tm.wants(2))
	}

	// A file the refused version fits: it is asked for again.
	if _, changed, err := tm.putFile(fileOf(t, mergeFileFits)); err != nil || !changed {
		t.Fatalf("putFile: %v, %v", changed, err)
	}
	if !tm.retried() || !tm.wants(1) {
		t.Fatal("the refused version is not retried after the file changed")
	}
	tm.putDynamic(apiKeyAt(t, 1))
	tm.check(t, 1, true, 0)

	// A file alone invalid changes nothing.
	before, applies := tm.View(), tm.applies
	invalid := &fileRules{parsed: &rules.File{Rules: []rules.Rule{{ID: "login"}}}, hash: hashOf(nil)} // no limits
	if _, _, err := tm.putFile(invalid); err == nil {
		t.Fatal("a file invalid alone was put in force")
	}
	if tm.View() != before || tm.applies != applies {
		t.Fatal("a refused file changed the rules in force")
	}

	// A file that conflicts with the dynamic rules in force wins; the
	// version it refused is not asked for again with it.
	if _, changed, err := tm.putFile(fileOf(t, mergeFile)); err != nil || !changed {
		t.Fatalf("putFile: %v, %v", changed, err)
	}
	tm.check(t, 0, false, 1)
	if tm.wants(1) {
		t.Fatal("the version refused by this very file is asked for again")
	}

	// Back to a file it fits, then a new version that does not parse: the
	// version in force stays, the refusal shows.
	if _, _, err := tm.putFile(fileOf(t, mergeFileFits)); err != nil {
		t.Fatal(err)
	}
	tm.putDynamic(apiKeyAt(t, 1))
	tm.check(t, 1, true, 0)
	tm.putDynamic(&dynamicRules{version: 2, atFault: []string{"x"}, err: errBadRule})
	tm.check(t, 1, true, 2)
	if tm.wants(2) || !tm.wants(3) {
		t.Fatal("the refused version 2 is asked for again, or version 3 is not")
	}

	// The same rules under a new version are not applied again.
	applies = tm.applies
	tm.putDynamic(apiKeyAt(t, 3))
	tm.check(t, 3, true, 0)
	if tm.applies != applies {
		t.Fatal("a version making the rules in force was applied again")
	}
}

var errBadRule = &rules.FieldError{Field: "limits", Reason: "stored by hand"}
