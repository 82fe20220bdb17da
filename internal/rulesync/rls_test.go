package rulesync_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/ratewarden/ratewarden/internal/rules"
	"github.com/ratewarden/ratewarden/internal/rulesync"
	"github.com/ratewarden/ratewarden/internal/testkit"
)

// The RLS directory's tests need neither Postgres nor Redis: dynamic rules,
// where a test needs them, live in memStore.

const messagingConfig = `
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 5}
  - key: to_number
    rate_limit: {unit: day, requests_per_unit: 100}
`

const toNumber = "rls.messaging.to_number"

// rlsLimiter is a Manager with a rules file and an RLS directory.
type rlsLimiter struct {
	*rulesync.Manager
	set  atomic.Pointer[rules.Set]
	dir  string
	logs *observer.ObservedLogs
}

// startRLS starts a Manager on fileRules and a directory holding
// config.yaml, and runs it (FilePoll 50ms unless opts change it). The
// start's error fails the test.
func startRLS(t *testing.T, config string, opts ...option) *rlsLimiter {
	t.Helper()
	l, err := newRLS(t, config, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// newRLS starts a Manager as startRLS does, returning the start's error.
func newRLS(t *testing.T, config string, opts ...option) (*rlsLimiter, error) {
	t.Helper()
	base := t.TempDir()
	file := filepath.Join(base, "rules.yaml")
	writeFile(t, file, fileRules)
	dir := filepath.Join(base, "rls")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if config != "" {
		writeFile(t, filepath.Join(dir, "config.yaml"), config)
	}
	core, logs := observer.New(zap.InfoLevel)
	l := &rlsLimiter{dir: dir, logs: logs}
	cfg := rulesync.Config{
		File:     file,
		RLSDir:   dir,
		Apply:    func(set *rules.Set) { l.set.Store(set) },
		FilePoll: 50 * time.Millisecond,
		Log:      zap.New(core),
	}
	for _, o := range opts {
		o(&cfg)
	}
	l.Manager = rulesync.New(cfg)
	if err := l.Start(context.Background()); err != nil {
		return l, err
	}
	return l, nil
}

// run runs the Manager until the test ends, with reload as its SIGHUP.
func (l *rlsLimiter) run(t *testing.T, reload chan os.Signal) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.Run(ctx, reload); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// limit is the first limit's requests of rule id in the set last applied,
// or -1.
func (l *rlsLimiter) limit(id string) int64 {
	r := l.set.Load().Rule(id)
	if r == nil {
		return -1
	}
	return r.Limits[0].Requests
}

func (l *rlsLimiter) source(id string) (rulesync.RuleView, bool) {
	for _, r := range l.View().Rules {
		if r.Rule.ID == id {
			return r, true
		}
	}
	return rulesync.RuleView{}, false
}

// Start loads the directory beside the rules file: its rules are in force,
// named as coming from it, and the version names its content.
func TestRLSStart(t *testing.T) {
	l := startRLS(t, messagingConfig)
	v := l.View()
	var sources []string
	for _, r := range v.Rules {
		sources = append(sources, r.Rule.ID+" "+r.Source)
	}
	want := []string{"api file", "login file", "rls.messaging.message_type_marketing.to_number rls_config", toNumber + " rls_config"}
	if !slices.Equal(sources, want) {
		t.Errorf("rules %q, want %q", sources, want)
	}
	if !regexp.MustCompile(`^0-[0-9a-f]{12}-[0-9a-f]{12}$`).MatchString(v.Version) || v.RLSDir != l.dir ||
		!strings.HasSuffix(v.Version, "-"+v.RLSHash) {
		t.Errorf("version %q, RLS %q %q", v.Version, v.RLSDir, v.RLSHash)
	}
	req := &rules.DescriptorRequest{Domain: "messaging", Descriptors: []rules.Descriptor{
		{Entries: []rules.Entry{{Key: "to_number", Value: "2061111111"}}, Cost: 1}}}
	if as := l.set.Load().MatchDescriptors(req, time.Now(), nil); len(as) != 1 || as[0].Rule.ID != toNumber {
		t.Errorf("applied %+v", as)
	}
	if n := testutil.ToFloat64(l.ReloadsMetric(rulesync.SourceRLS, "success")); n != 1 {
		t.Errorf("rls_config loads %v, want 1", n)
	}
}

// An invalid or missing directory stops the start, naming the variable and
// the problem.
func TestRLSStartInvalid(t *testing.T) {
	tests := []struct {
		name, config string
		remove       bool
		want         string
	}{
		{"invalid file", "domain: messaging\ndescriptors: [{key: a, rate_limit: {unit: fortnight, requests_per_unit: 1}}]\n", false,
			`config.yaml: domain messaging: descriptor a: rate_limit: unknown unit "fortnight"`},
		{"missing directory", "", true, "no such file or directory"},
		{"rule id of the rules file", messagingConfig, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var opts []option
			if tt.remove {
				opts = append(opts, func(c *rulesync.Config) { c.RLSDir += "-missing" })
			}
			if tt.want == "" { // a file rule with the id of a rule of the directory
				opts = append(opts, func(c *rulesync.Config) {
					writeFile(t, c.File, fileRules+`
  - id: `+toNumber+`
    algorithm: fixed_window
    limits: [{requests: 1, per: 1s}]
    descriptor: {domain: other, entries: [{key: k}]}
`)
				})
				tt.want = `rule "` + toNumber + `": id: duplicate`
			}
			l, err := newRLS(t, tt.config, opts...)
			if err == nil || !strings.Contains(err.Error(), "RLS_CONFIG_DIR ") || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("start: %v; want RLS_CONFIG_DIR and %q", err, tt.want)
			}
			if tt.name != "rule id of the rules file" {
				if n := testutil.ToFloat64(l.ReloadsMetric(rulesync.SourceRLS, "failure")); n != 1 {
					t.Errorf("rls_config failures %v, want 1", n)
				}
			}
		})
	}
}

// The directory reloads when its content changes; an invalid one is
// refused (counted, logged once per content) and the running rules stay,
// until a valid one comes.
func TestRLSReload(t *testing.T) {
	l := startRLS(t, messagingConfig)
	l.run(t, nil)
	config := filepath.Join(l.dir, "config.yaml")
	writeFile(t, config, strings.Replace(messagingConfig, "requests_per_unit: 100", "requests_per_unit: 300", 1))
	testkit.WaitFor(t, 2*time.Second, "the changed directory to apply", func() bool { return l.limit(toNumber) == 300 })

	// A new file adds its domain.
	writeFile(t, filepath.Join(l.dir, "mongo.yml"), "domain: mongo_cps\ndescriptors: [{key: database, value: users, rate_limit: {unit: second, requests_per_unit: 500}}]\n")
	testkit.WaitFor(t, 2*time.Second, "the new file to apply", func() bool { return l.limit("rls.mongo_cps.database_users") == 500 })

	running := l.View()
	writeFile(t, config, strings.Replace(messagingConfig, "unit: day", "unit: fortnight", 1))
	failures := func() float64 { return testutil.ToFloat64(l.ReloadsMetric(rulesync.SourceRLS, "failure")) }
	refusals := func() int { return l.logs.FilterMessage("RLS config refused; the running rules stay").Len() }
	testkit.WaitFor(t, 2*time.Second, "the invalid directory to be refused", func() bool { return failures() == 1 })
	time.Sleep(150 * time.Millisecond) // polls of the same content
	if err := l.ReloadRLS(false); err != nil || failures() != 1 || refusals() != 1 {
		t.Fatalf("polls of the same invalid directory: %v, %v failures, %d logged; want silence", err, failures(), refusals())
	}
	if err := l.ReloadRLS(true); err == nil || !strings.Contains(err.Error(), `unknown unit "fortnight"`) || refusals() != 2 {
		t.Fatalf("a forced reload of the invalid directory: %v (%d logged); want the error again", err, refusals())
	}
	if l.View() != running || l.limit(toNumber) != 300 {
		t.Fatal("an invalid directory replaced the running rules")
	}
	if g := testutil.ToFloat64(l.LastReloadSuccessfulMetric(rulesync.SourceRLS)); g != 0 {
		t.Fatalf("last reload successful = %v; want 0", g)
	}

	// A domain moved to another file is no duplicate once the first file
	// is gone.
	if err := os.Remove(config); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(l.dir, "messaging.yaml"), messagingConfig)
	testkit.WaitFor(t, 2*time.Second, "the valid directory to apply", func() bool { return l.limit(toNumber) == 100 })
	if l.View().Version == running.Version {
		t.Error("the version did not change with the directory")
	}
	if g := testutil.ToFloat64(l.LastReloadSuccessfulMetric(rulesync.SourceRLS)); g != 1 {
		t.Fatalf("last reload successful = %v; want 1", g)
	}
}

// SIGHUP reloads the directory without waiting for a poll.
func TestRLSReloadOnSignal(t *testing.T) {
	l := startRLS(t, messagingConfig, func(c *rulesync.Config) { c.FilePoll = time.Hour })
	hup := make(chan os.Signal, 1)
	l.run(t, hup)
	writeFile(t, filepath.Join(l.dir, "config.yaml"), strings.Replace(messagingConfig, "requests_per_unit: 100", "requests_per_unit: 7", 1))
	hup <- os.Interrupt // any signal on the channel
	testkit.WaitFor(t, 2*time.Second, "the signal to reload the directory", func() bool { return l.limit(toNumber) == 7 })
}

// A dynamic rule overrides a rule of the directory; deleting it brings the
// directory's back, and a rule of the directory cannot be deleted.
func TestRLSDynamicOverride(t *testing.T) {
	store := &memStore{rules: map[string]rulesync.StoredRule{}}
	l := startRLS(t, messagingConfig, func(c *rulesync.Config) {
		c.Connect = func(context.Context) (rulesync.Store, error) { return store, nil }
		c.StorePoll = time.Hour
	})
	who := rulesync.Author{Actor: "alice"}
	if _, err := l.SetShadow(context.Background(), toNumber, true, who); err != nil {
		t.Fatal(err)
	}
	rv, _ := l.source(toNumber)
	if rv.Source != rulesync.SourceDynamic || !rv.OverridesFile || !rv.Rule.Shadow || rv.Rule.Descriptor == nil ||
		rv.Rule.Descriptor.Domain != "messaging" || !l.set.Load().Rule(toNumber).Shadow {
		t.Fatalf("after SetShadow: %+v", rv)
	}
	if _, err := l.Delete(context.Background(), toNumber, who); err != nil {
		t.Fatal(err)
	}
	if rv, _ := l.source(toNumber); rv.Source != rulesync.SourceRLS || rv.Rule.Shadow {
		t.Fatalf("after Delete: %+v", rv)
	}
	_, err := l.Delete(context.Background(), toNumber, who)
	if !errors.Is(err, rulesync.ErrNotFound) || !strings.Contains(err.Error(), "RLS_CONFIG_DIR") {
		t.Fatalf("deleting a rule of the directory: %v; want ErrNotFound naming RLS_CONFIG_DIR", err)
	}
}

// memStore is a rule store in memory.
type memStore struct {
	mu      sync.Mutex
	version int64
	rules   map[string]rulesync.StoredRule
}

func (s *memStore) RulesVersion(context.Context) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version, nil
}

func (s *memStore) DynamicRules(context.Context) (int64, []rulesync.StoredRule, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []rulesync.StoredRule
	for _, r := range s.rules {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b rulesync.StoredRule) int { return strings.Compare(a.ID, b.ID) })
	return s.version, out, nil
}

func (s *memStore) Change(_ context.Context, id string, who rulesync.Author, prepare rulesync.Prepare) (rulesync.Change, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var stored []rulesync.StoredRule
	for _, r := range s.rules {
		stored = append(stored, r)
	}
	slices.SortFunc(stored, func(a, b rulesync.StoredRule) int { return strings.Compare(a.ID, b.ID) })
	rule, err := prepare(s.version, stored)
	if err != nil {
		return rulesync.Change{}, err
	}
	before, ok := s.rules[id]
	if rule == nil && !ok {
		return rulesync.Change{}, rulesync.ErrNotStored
	}
	s.version++
	if rule == nil {
		delete(s.rules, id)
	} else {
		s.rules[id] = rulesync.StoredRule{ID: id, Rule: rule, Version: s.version, UpdatedBy: who.Actor}
	}
	return rulesync.Change{Version: s.version, Before: before.Rule, After: rule}, nil
}

func (s *memStore) Close() {}

// put stores rule under id as another limiter would.
func (s *memStore) put(t *testing.T, id, rule string) {
	t.Helper()
	_, err := s.Change(context.Background(), id, rulesync.Author{Actor: "alice"},
		func(int64, []rulesync.StoredRule) (json.RawMessage, error) { return json.RawMessage(rule), nil })
	if err != nil {
		t.Fatal(err)
	}
}
