// Package rulesync keeps a process's rules current: the limiter's, and the
// detector's (its rules file alone, for the detection section and the
// exemptions). A limiter's rules in force are
// the rules file, the rules of a directory of envoyproxy/ratelimit
// configuration files (RLS_CONFIG_DIR, see package rlsconfig) and the
// dynamic rules of the rule store (Postgres): a dynamic rule overrides the
// rule of the same id of either file source. The file and the directory are
// reloaded on SIGHUP and when their content changes; the dynamic rules are
// reloaded when a change is announced on Redis pub/sub and when the store's
// version moves (polled), so a lost announcement delays an update but never
// loses it. A file or directory that does not validate is refused and the
// running rules stay; one refused only because it clashes with the other
// (a rule id both have) is tried again when the other changes. Between
// reads a poll only stats them (stamp.go).
//
// The files (the rules file and the directory) win over the dynamic rules:
// when the two do not compile together, the dynamic version is refused and
// the files' rules run without any dynamic rule, at start (a limiter always
// starts on valid files) and when a file changes (a running limiter takes a
// changed file as a restarted one would). A refused version is remembered
// (View.DynamicRefused) and tried again whenever the content of a file or
// the directory changes, and when the store's version moves. A new dynamic version that
// does not compile with the files is refused and the dynamic rules in
// force, if any, stay.
//
// The Manager also makes the changes of the admin API: it validates a rule
// exactly as the file loader does, stores it with its audit row, applies it
// at once on this instance and announces it to the others.
package rulesync

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/rules"
)

// Announcer carries "the dynamic rules are at version N" between limiters
// (redisfleet.RuleChanges).
type Announcer interface {
	Publish(ctx context.Context, version int64) error
	Subscribe(ctx context.Context, onVersion func(int64), onResync func()) error
}

// Config wires a Manager.
type Config struct {
	// File is the rules file (RULES_FILE).
	File string
	// RLSDir is a directory of envoyproxy/ratelimit configuration files
	// (RLS_CONFIG_DIR), read as often as File; empty: none.
	RLSDir string
	// RLSFromXDS: the RLS config comes from SetRLS (an xDS management
	// server, package rlsxds) instead of RLSDir.
	RLSFromXDS bool
	Options    rules.Options
	// Apply puts a rule set in force (limiter.Service.SetRules).
	Apply func(*rules.Set)
	// Connect opens the rule store; it is retried every StorePoll until it
	// succeeds. Nil turns dynamic rules off.
	Connect func(ctx context.Context) (Store, error)
	// Changes, when set, announces and learns changes between limiters.
	Changes Announcer
	// Report, when set, tells the others which version this instance runs
	// (redisfleet.Heartbeats.ReportRules, bounded by its own timeout).
	Report func(version string, appliedAt time.Time)
	// FilePoll is how often the file and RLSDir are read for changes
	// (default 1s);
	// StorePoll how often the store's version is read (default 1s); Timeout
	// bounds each store operation (default 2s), an admin write's included
	// (its caller's context may bound it sooner).
	FilePoll, StorePoll, Timeout time.Duration
	Log                          *zap.Logger
	Registerer                   prometheus.Registerer
	Now                          func() time.Time
}

// Errors of the admin changes.
var (
	// ErrUnavailable: the rule store could not be reached; nothing changed.
	ErrUnavailable = errors.New("dynamic rule store unavailable")
	// ErrNotFound: no such rule.
	ErrNotFound = errors.New("no such rule")
)

// InvalidError is a rule or rule set refused by validation; nothing changed.
// rules.FieldErrors(err) lists the fields at fault.
type InvalidError struct{ Err error }

func (e *InvalidError) Error() string { return e.Err.Error() }

func (e *InvalidError) Unwrap() error { return e.Err }

// Sources of a rule.
const (
	SourceFile    = "file"
	SourceDynamic = "dynamic"
	SourceRLS     = "rls_config" // RLS_CONFIG_DIR
)

// View is the rule set in force on this instance.
type View struct {
	// Version names the merged rule set: "<dynamic version>-<file hash>",
	// then "-<RLS hash>" when an RLS directory is configured.
	Version        string
	DynamicVersion int64
	File           string
	FileHash       string // first 12 hex digits of the file's SHA-256
	RLSDir         string // empty: none
	RLSHash        string // first 12 hex digits of rlsconfig.Hash of its files
	AppliedAt      time.Time
	Rules          []RuleView // evaluation order
	Set            *rules.Set // the compiled set
	// DynamicRefused, when set, is the last version of the dynamic rules
	// this instance refused: DynamicVersion (0: none) stays in force in
	// its stead. Cleared when a version is applied.
	DynamicRefused *Refusal
}

// Refusal is a version of the dynamic rules that was refused: one of its
// rules does not parse, or the set does not compile with the files' rules.
type Refusal struct {
	Version int64
	// Rules are the ids of the dynamic rules at fault: those that do not
	// parse, or that do not compile with the files' rules one by one (else,
	// when only several together fail, those the error names).
	Rules []string
	Err   error
	At    time.Time
}

// RuleView is one rule in force and where it comes from.
type RuleView struct {
	Rule   rules.Rule
	Source string // SourceFile, SourceRLS or SourceDynamic
	// OverridesFile: a dynamic rule replacing the rule of its id of the
	// rules file or of the RLS directory.
	OverridesFile bool
	// Version, UpdatedAt and UpdatedBy describe a dynamic rule's last change.
	Version   int64
	UpdatedAt time.Time
	UpdatedBy string
}

// Result is a change made through the Manager.
type Result struct {
	Change Change
	// View is the rule set in force on this instance after the change.
	View *View
	// AnnounceErr is set when the others could not be told at once; they
	// learn the change from their next poll.
	AnnounceErr error
}

// Manager keeps the rules in force and makes dynamic changes. Its methods
// are safe for concurrent use. Each source (the rules file, the RLS config
// from RLSDir or xDS, the dynamic rules of the store) loads on its own and
// hands what it loaded to the merger, which alone holds the rules in force:
// it compiles the sources' snapshots into one set, puts it in force, and
// applies the refusal policy (refusal.go) when they do not compile
// together.
type Manager struct {
	cfg     Config
	metrics *metrics
	file    *fileSource
	rls     *rlsSource
	dyn     *dynamicSource
	merge   *merger
}

// New returns a Manager; Start loads the rules.
func New(cfg Config) *Manager {
	if cfg.FilePoll <= 0 {
		cfg.FilePoll = time.Second
	}
	if cfg.StorePoll <= 0 {
		cfg.StorePoll = time.Second
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	m := &Manager{cfg: cfg, metrics: newMetrics(cfg.Registerer, cfg.Connect != nil, cfg.RLSDir != "" || cfg.RLSFromXDS)}
	m.merge = &merger{cfg: &m.cfg, metrics: m.metrics}
	if cfg.Connect != nil {
		m.merge.retry = make(chan struct{}, 1)
	}
	m.file = newFileSource(cfg.File, cfg.Log, m.metrics, m.merge)
	m.rls = newRLSSource(cfg.RLSDir, cfg.Log, m.metrics, m.merge)
	m.dyn = &dynamicSource{connect: cfg.Connect, timeout: cfg.Timeout, log: cfg.Log, merge: m.merge, wake: make(chan struct{}, 1)}
	return m
}

// Start loads the rules file and the RLS directory (an error is fatal:
// there is nothing to run), then the dynamic rules when the store answers
// within the timeout (else the files' rules run and the store is retried by
// Run), and applies them. Dynamic rules that do not load, or do not compile
// with the files' rules, are refused (logged, counted, View.DynamicRefused)
// and the files' rules run alone: Start fails only when the files' rules
// do.
func (m *Manager) Start(ctx context.Context) error {
	f, err := m.file.first()
	if err != nil {
		return err
	}
	c, err := m.rls.first()
	if err != nil {
		return err
	}
	if err := m.merge.start(f, c, m.dyn.first(ctx)); err != nil {
		if c != nil {
			return fmt.Errorf("RULES_FILE %s with RLS_CONFIG_DIR %s: %w", m.cfg.File, m.cfg.RLSDir, err)
		}
		return fmt.Errorf("RULES_FILE %s: %w", m.cfg.File, err)
	}
	m.file.started(f.hash)
	if c != nil {
		m.rls.started(c.Hash)
	}
	return nil
}

// Run keeps the rules current until ctx ends: the file and the RLS
// directory on every signal from reload (SIGHUP) and every FilePoll, the
// dynamic rules on every announcement and every StorePoll, and at once
// when the merger retries a refused version. The files and the store are
// watched by loops of their own, so that a store that hangs (an admin
// write waiting on a locked table holds the store source's lock) never
// delays a reload of the files. It closes the store when it returns.
func (m *Manager) Run(ctx context.Context, reload <-chan os.Signal) {
	var wg sync.WaitGroup
	defer func() {
		wg.Wait()
		m.dyn.close()
	}()
	if m.cfg.Connect != nil {
		if m.cfg.Changes != nil {
			wg.Go(func() { m.dyn.subscribe(ctx, m.cfg.Changes) })
		}
		wg.Go(func() { m.watchStore(ctx) })
	}
	fileTick := time.NewTicker(m.cfg.FilePoll)
	defer fileTick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-reload:
			m.cfg.Log.Info("reloading rules file on signal", zap.String("file", m.cfg.File), zap.String("rls_dir", m.cfg.RLSDir))
			_ = m.ReloadFile(true)
			_ = m.ReloadRLS(true)
		case <-fileTick.C:
			_ = m.ReloadFile(false)
			_ = m.ReloadRLS(false)
		}
	}
}

// watchStore refreshes the dynamic rules on every announcement, every
// StorePoll and every retry of the merger, until ctx ends.
func (m *Manager) watchStore(ctx context.Context) {
	t := time.NewTicker(m.cfg.StorePoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.dyn.wake:
		case <-m.merge.retry:
		case <-t.C:
		}
		m.dyn.refresh(ctx)
	}
}

// View returns the rule set in force.
func (m *Manager) View() *View { return m.merge.View() }

// DynamicVersion returns the version of the dynamic rules in force.
func (m *Manager) DynamicVersion() int64 { return m.merge.dynamicVersion() }
