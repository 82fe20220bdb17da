package rulesync_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ratewarden/ratewarden/internal/pgrules"
	"github.com/ratewarden/ratewarden/internal/pgstore"
	"github.com/ratewarden/ratewarden/internal/redisfleet"
	"github.com/ratewarden/ratewarden/internal/rules"
	"github.com/ratewarden/ratewarden/internal/rulesync"
	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/pgtest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

const fileRules = `
rules:
  - id: login
    match: {endpoints: ["/login"]}
    key: [ip]
    algorithm: fixed_window
    limits: [{requests: 100, per: 1m}]
  - id: api
    match: {endpoints: ["/api/**"]}
    key: [ip]
    algorithm: token_bucket
    limits: [{rate: 10, per: 1s, burst: 20}]
`

// system is what the limiters of one deployment share: a rules file, a
// database and a Redis key prefix.
type system struct {
	t      *testing.T
	file   string
	dbURL  string
	prefix string
}

func newSystem(t *testing.T) *system {
	t.Helper()
	file := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, file, fileRules)
	return &system{t: t, file: file, dbURL: pgtest.Database(t), prefix: redistest.Prefix(t, redistest.Client(t))}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	// Written beside and renamed, as editors and ConfigMaps do, so a poll
	// never reads half a file.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// limiter is one Manager with the rule set it last applied.
type limiter struct {
	*rulesync.Manager
	set atomic.Pointer[rules.Set]
	reg *prometheus.Registry
}

type option func(*rulesync.Config)

func withoutAnnouncements(c *rulesync.Config) { c.Changes = nil }

func (s *system) start(opts ...option) *limiter {
	s.t.Helper()
	l := &limiter{reg: prometheus.NewRegistry()}
	client := redistest.Client(s.t)
	cfg := rulesync.Config{
		File:    s.file,
		Options: rules.Options{KeyPrefix: s.prefix},
		Apply:   func(set *rules.Set) { l.set.Store(set) },
		Connect: func(ctx context.Context) (rulesync.Store, error) {
			st, err := pgstore.OpenMigrated(ctx, s.dbURL, nil)
			if err != nil {
				return nil, err
			}
			return pgrules.New(st), nil
		},
		Changes:    redisfleet.NewRuleChanges(client, s.prefix),
		FilePoll:   50 * time.Millisecond,
		StorePoll:  time.Hour, // announcements only, unless a test says otherwise
		Registerer: l.reg,
	}
	for _, o := range opts {
		o(&cfg)
	}
	l.Manager = rulesync.New(cfg)
	if err := l.Start(context.Background()); err != nil {
		s.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.Run(ctx, nil); close(done) }()
	s.t.Cleanup(func() { cancel(); <-done })
	return l
}

// limit is the first limit of rule id in the set last applied, or -1.
func (l *limiter) limit(id string) int64 {
	r := l.set.Load().Rule(id)
	if r == nil {
		return -1
	}
	return max(r.Limits[0].Requests, r.Limits[0].Burst)
}

var alice = rulesync.Author{Actor: "alice", SourceAddr: "192.0.2.1", Instance: "a"}

const loginAt50 = `{"id": "login", "match": {"endpoints": ["/login"]}, "key": ["ip"],
	"algorithm": "fixed_window", "limits": [{"requests": 50, "per": "1m"}]}`

// A rule changed on one limiter is applied by the others as soon as the
// announcement arrives (no polling here), and at once by the one that
// changed it.
func TestChangeAppliesEverywhere(t *testing.T) {
	s := newSystem(t)
	a, b, c := s.start(), s.start(), s.start()
	res, err := a.Put(context.Background(), "login", []byte(loginAt50), alice)
	if err != nil {
		t.Fatal(err)
	}
	if res.Change.Version != 1 || res.AnnounceErr != nil {
		t.Fatalf("put: %+v", res)
	}
	if got := a.limit("login"); got != 50 {
		t.Fatalf("the changing limiter runs limit %d right after the put; want 50", got)
	}
	for name, l := range map[string]*limiter{"b": b, "c": c} {
		testkit.WaitFor(t, 2*time.Second, name+" to apply the change", func() bool { return l.limit("login") == 50 })
		v := l.View()
		if v.DynamicVersion != 1 || v.Version != a.View().Version {
			t.Fatalf("%s runs %s (dynamic %d), a runs %s", name, v.Version, v.DynamicVersion, a.View().Version)
		}
	}
	var login rulesync.RuleView
	for _, r := range b.View().Rules {
		if r.Rule.ID == "login" {
			login = r
		}
	}
	if login.Source != rulesync.SourceDynamic || !login.OverridesFile || login.UpdatedBy != "alice" || login.Version != 1 {
		t.Fatalf("login as b sees it: %+v", login)
	}

	// Deleting the override brings the file's rule back everywhere.
	if _, err := b.Delete(context.Background(), "login", alice); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 2*time.Second, "a to restore the file's rule", func() bool { return a.limit("login") == 100 })
	if _, err := b.Delete(context.Background(), "login", alice); !errors.Is(err, rulesync.ErrNotFound) ||
		!strings.Contains(err.Error(), "rules file") {
		t.Fatalf("deleting a file rule: %v; want ErrNotFound naming the rules file", err)
	}
}

// Without announcements the poll of the store's version picks a change up.
func TestPollPicksUpMissedChange(t *testing.T) {
	s := newSystem(t)
	a := s.start()
	deaf := s.start(withoutAnnouncements, func(c *rulesync.Config) { c.StorePoll = 100 * time.Millisecond })
	if _, err := a.Put(context.Background(), "login", []byte(loginAt50), alice); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 2*time.Second, "the poll to apply the change", func() bool { return deaf.limit("login") == 50 })
}

// An invalid rule is refused with the field at fault, and nothing changes:
// not the store's version, not the rules in force.
func TestInvalidRuleChangesNothing(t *testing.T) {
	s := newSystem(t)
	a := s.start()
	before := a.View()
	cases := map[string]struct{ id, body, field string }{
		"zero requests":   {"login", `{"id": "login", "key": ["ip"], "algorithm": "fixed_window", "limits": [{"requests": 0, "per": "1m"}]}`, "limits[0].requests"},
		"bad duration":    {"login", `{"id": "login", "key": ["ip"], "algorithm": "fixed_window", "limits": [{"requests": 5, "per": 60}]}`, "limits.per"},
		"unknown field":   {"login", `{"id": "login", "limit": 5}`, "limit"},
		"id mismatch":     {"other", loginAt50, "id"},
		"bad algorithm":   {"login", `{"id": "login", "key": ["ip"], "algorithm": "leaky", "limits": [{"requests": 5, "per": "1m"}]}`, "algorithm"},
		"not json at all": {"login", `limits: 5`, ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := a.Put(context.Background(), tc.id, []byte(tc.body), alice)
			var invalid *rulesync.InvalidError
			if !errors.As(err, &invalid) {
				t.Fatalf("err = %v; want *InvalidError", err)
			}
			if tc.field != "" {
				fields := rules.FieldErrors(err)
				if len(fields) == 0 || fields[0].Field != tc.field {
					t.Fatalf("fields at fault %v; want %s", fields, tc.field)
				}
			}
		})
	}
	db, err := pgstore.Open(context.Background(), s.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	st := pgrules.New(db)
	defer st.Close()
	if v, err := st.RulesVersion(context.Background()); err != nil || v != 0 {
		t.Fatalf("store version %d, %v after refused changes; want 0", v, err)
	}
	if a.View() != before {
		t.Fatal("a refused change replaced the rules in force")
	}
}

// Shadow mode is switched per rule through the Manager, also for a rule of
// the file (which it overrides with a dynamic copy).
func TestSetShadow(t *testing.T) {
	s := newSystem(t)
	a := s.start()
	if _, err := a.SetShadow(context.Background(), "api", true, alice); err != nil {
		t.Fatal(err)
	}
	r := a.set.Load().Rule("api")
	if !r.Shadow || r.Limits[0].Burst != 20 || r.Algorithm != "token_bucket" {
		t.Fatalf("api after SetShadow: %+v; want the file's rule in shadow mode", r)
	}
	if _, err := a.SetShadow(context.Background(), "nope", true, alice); !errors.Is(err, rulesync.ErrNotFound) {
		t.Fatalf("shadow of an unknown rule: %v; want ErrNotFound", err)
	}
}

// The file reloads when it changes; an invalid file is refused (counted)
// and the running rules stay, until a valid one comes.
func TestFileReload(t *testing.T) {
	s := newSystem(t)
	a := s.start()
	writeFile(t, s.file, strings.Replace(fileRules, "requests: 100", "requests: 300", 1))
	testkit.WaitFor(t, 2*time.Second, "the changed file to apply", func() bool { return a.limit("login") == 300 })

	running := a.View()
	writeFile(t, s.file, strings.Replace(fileRules, "fixed_window", "fixed_windw", 1))
	failures := func() float64 {
		return testutil.ToFloat64(a.ReloadsMetric(rulesync.SourceFile, "failure"))
	}
	testkit.WaitFor(t, 2*time.Second, "the invalid file to be refused", func() bool { return failures() == 1 })
	if err := a.ReloadFile(false); err != nil || failures() != 1 {
		t.Fatalf("a poll of the same invalid file: %v, %v failures; want silence", err, failures())
	}
	if err := a.ReloadFile(true); err == nil || !strings.Contains(err.Error(), "algorithm") {
		t.Fatalf("a forced reload of the invalid file: %v; want the error again", err)
	}
	if a.View() != running || a.limit("login") != 300 {
		t.Fatal("an invalid file replaced the running rules")
	}
	if g := testutil.ToFloat64(a.LastReloadSuccessfulMetric(rulesync.SourceFile)); g != 0 {
		t.Fatalf("last reload successful = %v; want 0", g)
	}

	writeFile(t, s.file, fileRules)
	testkit.WaitFor(t, 2*time.Second, "the valid file to apply", func() bool { return a.limit("login") == 100 })
}

// The store down at start: the file's rules run, changes answer
// ErrUnavailable, and readiness says why.
func TestStoreUnavailable(t *testing.T) {
	s := newSystem(t)
	s.dbURL = "postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=1"
	a := s.start()
	if a.limit("login") != 100 {
		t.Fatal("the file's rules are not in force")
	}
	if a.StoreError() == nil {
		t.Fatal("StoreError is nil with the store down")
	}
	if _, err := a.Put(context.Background(), "login", []byte(loginAt50), alice); !errors.Is(err, rulesync.ErrUnavailable) {
		t.Fatalf("put with the store down: %v; want ErrUnavailable", err)
	}
}
