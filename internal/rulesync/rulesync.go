// Package rulesync keeps a limiter's rules current. The rules in force are
// the rules file, the rules of a directory of envoyproxy/ratelimit
// configuration files (RLS_CONFIG_DIR, see package rlsconfig) and the
// dynamic rules of the rule store (Postgres): a dynamic rule overrides the
// rule of the same id of either file source. The file and the directory are
// reloaded on SIGHUP and when their content changes; the dynamic rules are
// reloaded when a change is announced on Redis pub/sub and when the store's
// version moves (polled), so a lost announcement delays an update but never
// loses it. A file or directory that does not validate is refused and the
// running rules stay.
//
// The files (the rules file and the directory) win over the dynamic rules:
// when the two do not compile together, the dynamic version is refused and
// the files' rules run without any dynamic rule, at start (a limiter always
// starts on valid files) and when a file changes (a running limiter takes a
// changed file as a restarted one would). A refused version is remembered
// (View.DynamicRefused) and tried again whenever a file or the directory
// changes, and when the store's version moves. A new dynamic version that
// does not compile with the files is refused and the dynamic rules in
// force, if any, stay.
//
// The Manager also makes the changes of the admin API: it validates a rule
// exactly as the file loader does, stores it with its audit row, applies it
// at once on this instance and announces it to the others.
package rulesync

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/rlsconfig"
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
	// bounds each background store operation (default 2s).
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

type dynamicRule struct {
	rule   rules.Rule
	stored StoredRule
}

// Manager keeps the rules in force and makes dynamic changes. Its methods
// are safe for concurrent use.
type Manager struct {
	cfg     Config
	metrics *metrics

	mu       sync.Mutex // serializes loads, changes and applies
	digest   string     // digestOf the rules in force
	file     *rules.File
	fileHash string
	refused  string // hash of the last file content refused, reported once
	// fileFailing and rlsFailing: the last load of the source was refused,
	// so the next that is not says so (its content may be the one in
	// force again, which is not applied again).
	fileFailing, rlsFailing bool
	rls                     *rlsconfig.Config // nil without RLSDir
	rlsRefused              string            // hash of the last RLSDir content refused, reported once
	dynamic                 []dynamicRule
	dynVersion              int64
	// refusedVersion is a version of the dynamic rules that was refused:
	// polls skip it until the version moves, or until a change of the
	// files clears it to try it again.
	refusedVersion int64
	refusal        *Refusal // the last refusal, until a version applies
	store          Store
	storeErr       atomic.Pointer[error] // nil: the store answered last time
	view           atomic.Pointer[View]
	wake           chan struct{}
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
	return &Manager{cfg: cfg, metrics: newMetrics(cfg.Registerer, cfg.Connect != nil, cfg.RLSDir != "" || cfg.RLSFromXDS),
		wake: make(chan struct{}, 1)}
}

// Start loads the rules file and the RLS directory (an error is fatal:
// there is nothing to run), then the dynamic rules when the store answers
// within the timeout (else the files' rules run and the store is retried by
// Run), and applies them. Dynamic rules that do not load, or do not compile
// with the files' rules, are refused (logged, counted, View.DynamicRefused)
// and the files' rules run alone: Start fails only when the files' rules
// do.
func (m *Manager) Start(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	f, hash, err := readFile(m.cfg.File)
	if err != nil {
		m.metrics.reload(SourceFile, resultFailure)
		return err
	}
	m.file, m.fileHash = f, hash
	if m.cfg.RLSDir != "" {
		c, err := rlsconfig.LoadDir(m.cfg.RLSDir)
		if err != nil {
			m.metrics.reload(SourceRLS, resultFailure)
			return fmt.Errorf("RLS_CONFIG_DIR %s: %w", m.cfg.RLSDir, err)
		}
		m.rls = c
		m.logRLSWarnings(c)
	}
	loaded := false
	if m.cfg.Connect != nil {
		sctx, cancel := context.WithTimeout(ctx, m.cfg.Timeout)
		loaded = m.connectLocked(sctx) == nil && m.loadDynamicLocked(sctx) == nil
		cancel() // if not, logged: the files' rules run until the store answers
	}
	if _, err := m.applyFilesLocked(); err != nil {
		if m.rls != nil {
			return fmt.Errorf("RULES_FILE %s with RLS_CONFIG_DIR %s: %w", m.cfg.File, m.cfg.RLSDir, err)
		}
		return fmt.Errorf("RULES_FILE %s: %w", m.cfg.File, err)
	}
	m.metrics.reload(SourceFile, resultSuccess)
	if m.rls != nil {
		m.metrics.reload(SourceRLS, resultSuccess)
	}
	if loaded && m.refusal == nil {
		m.metrics.reload(SourceDynamic, resultSuccess)
	}
	return nil
}

// Run keeps the rules current until ctx ends: the file and the RLS
// directory on every signal from reload (SIGHUP) and every FilePoll, the
// dynamic rules on every announcement and every StorePoll. It closes the
// store when it returns.
func (m *Manager) Run(ctx context.Context, reload <-chan os.Signal) {
	var wg sync.WaitGroup
	defer func() {
		wg.Wait()
		m.mu.Lock()
		if m.store != nil {
			m.store.Close()
		}
		m.mu.Unlock()
	}()
	if m.cfg.Changes != nil && m.cfg.Connect != nil {
		wg.Go(func() {
			_ = m.cfg.Changes.Subscribe(ctx, func(v int64) {
				if v != m.DynamicVersion() {
					m.poke()
				}
			}, m.poke) // after a reconnection, announcements may have been missed
		})
	}
	fileTick := time.NewTicker(m.cfg.FilePoll)
	defer fileTick.Stop()
	var storeTick <-chan time.Time
	if m.cfg.Connect != nil {
		t := time.NewTicker(m.cfg.StorePoll)
		defer t.Stop()
		storeTick = t.C
	}
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
		case <-m.wake:
			m.refresh(ctx)
		case <-storeTick:
			m.refresh(ctx)
		}
	}
}

func (m *Manager) poke() {
	select {
	case m.wake <- struct{}{}:
	default: // a refresh is already due
	}
}

// ReloadFile reads the rules file and applies it if its content changed.
// An invalid file is refused (counted, and logged once per content unless
// force: an operator's SIGHUP hears about it again) and the running rules
// stay. A valid file that conflicts with the dynamic rules in force is
// applied without them (see applyFilesLocked); once a file is applied, a
// dynamic version refused before is tried again. A file that makes the
// rules in force (a comment changed; or, with force, the same content) is
// counted unchanged and not applied again.
func (m *Manager) ReloadFile(force bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if force {
		m.refused = ""
	}
	data, err := os.ReadFile(m.cfg.File)
	if err != nil {
		return m.refuseFile("read:"+err.Error(), err)
	}
	hash := hashOf(data)
	if hash == m.fileHash && (force || m.fileFailing) {
		// The content in force: after a refusal (the bad edit undone) it
		// is accepted again, and the gauge must say so.
		m.metrics.reload(SourceFile, resultUnchanged)
		if !m.fileAcceptedLocked() {
			m.cfg.Log.Info("rules file unchanged", zap.String("file", m.cfg.File))
		}
		return nil
	}
	if hash == m.fileHash || hash == m.refused {
		return nil
	}
	f, err := rules.Parse(data)
	if err != nil {
		return m.refuseFile(hash, err)
	}
	prior := m.refusal
	old, oldHash := m.file, m.fileHash
	m.file, m.fileHash = f, hash
	changed, err := m.applyFilesLocked()
	if err != nil {
		m.file, m.fileHash = old, oldHash
		return m.refuseFile(hash, err)
	}
	m.refused = ""
	m.metrics.reload(SourceFile, resultOf(changed))
	m.fileAcceptedLocked()
	if !changed {
		m.cfg.Log.Info("rules file changed, its rules did not; nothing applied", zap.String("file", m.cfg.File),
			zap.String("version", m.view.Load().Version))
		return nil
	}
	m.cfg.Log.Info("rules file reloaded", zap.String("file", m.cfg.File), zap.String("version", m.view.Load().Version))
	m.retryDynamicLocked(prior)
	return nil
}

// refuseFile counts a refused file and logs it unless the same content (or
// read error), named by key, was already logged.
func (m *Manager) refuseFile(key string, err error) error {
	m.metrics.reload(SourceFile, resultFailure)
	m.fileFailing = true
	if key != m.refused {
		m.refused = key
		m.cfg.Log.Error("rules file refused; the running rules stay", zap.String("file", m.cfg.File), zap.Error(err))
	}
	return fmt.Errorf("RULES_FILE %s: %w", m.cfg.File, err)
}

// fileAcceptedLocked, once a load of the rules file is not refused, logs
// that the file is accepted again when the load before it was refused, and
// reports whether it did.
func (m *Manager) fileAcceptedLocked() bool {
	if !m.fileFailing {
		return false
	}
	m.fileFailing = false
	m.cfg.Log.Info("rules file accepted again", zap.String("file", m.cfg.File), zap.String("version", m.view.Load().Version))
	return true
}

// rlsAcceptedLocked is fileAcceptedLocked for the RLS config.
func (m *Manager) rlsAcceptedLocked() bool {
	if !m.rlsFailing {
		return false
	}
	m.rlsFailing = false
	m.cfg.Log.Info("RLS config accepted again", zap.String("dir", m.cfg.RLSDir), zap.String("version", m.view.Load().Version))
	return true
}

// ReloadRLS reads the RLS directory and applies it if its content (names
// and contents of its files) changed; without RLSDir it does nothing. An
// invalid directory is refused (counted, and logged once per content unless
// force) and the running rules stay; a valid one is applied, and a refused
// dynamic version tried again, and one that makes the rules in force is
// counted unchanged, as ReloadFile does.
func (m *Manager) ReloadRLS(force bool) error {
	if m.cfg.RLSDir == "" {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if force {
		m.rlsRefused = ""
	}
	files, err := rlsconfig.ReadDir(m.cfg.RLSDir)
	if err != nil {
		return m.refuseRLS("read:"+err.Error(), err)
	}
	hash := rlsconfig.Hash(files)
	if m.rls != nil && hash == m.rls.Hash && (force || m.rlsFailing) {
		m.metrics.reload(SourceRLS, resultUnchanged)
		if !m.rlsAcceptedLocked() {
			m.cfg.Log.Info("RLS config unchanged", zap.String("dir", m.cfg.RLSDir))
		}
		return nil
	}
	if (m.rls != nil && hash == m.rls.Hash) || hash == m.rlsRefused {
		return nil
	}
	c, err := rlsconfig.Load(files)
	if err != nil {
		return m.refuseRLS(hash, err)
	}
	changed, err := m.putRLSLocked(c)
	if err != nil {
		return m.refuseRLS(hash, err)
	}
	m.rlsRefused = ""
	if !changed {
		m.cfg.Log.Info("RLS config changed, its rules did not; nothing applied", zap.String("dir", m.cfg.RLSDir),
			zap.String("version", m.view.Load().Version))
		return nil
	}
	m.cfg.Log.Info("RLS config reloaded", zap.String("dir", m.cfg.RLSDir), zap.Int("files", len(c.Files)),
		zap.Int("domains", len(c.Domains)), zap.Int("rules", len(c.Rules)), zap.String("version", m.view.Load().Version))
	return nil
}

// putRLSLocked puts c in force as the RLS config with the file and the
// dynamic rules, counted, its warnings logged and a refused dynamic version
// tried again with it; or, when they do not compile together, keeps the
// RLS config in force and returns why (the caller counts the refusal). It
// reports whether the rules in force changed: c may make the same rules
// as the config before it (see putLocked).
func (m *Manager) putRLSLocked(c *rlsconfig.Config) (bool, error) {
	prior := m.refusal
	old := m.rls
	m.rls = c
	changed, err := m.applyFilesLocked()
	if err != nil {
		m.rls = old
		return false, err
	}
	m.metrics.reload(SourceRLS, resultOf(changed))
	m.rlsAcceptedLocked()
	if changed {
		m.logRLSWarnings(c)
		m.retryDynamicLocked(prior)
	}
	return changed, nil
}

// SetRLS puts c, an RLS config from the xDS management server, in force in
// place of the one before (the rules file and the dynamic rules stay), or
// refuses it with the reason when it does not compile with them: the
// rules in force then stay. Counted as the RLS directory's loads are. It
// reports whether the rules in force changed: a config that makes the
// rules in force (re-published under a new version, its domains in
// another order) is taken without applying them again.
func (m *Manager) SetRLS(c *rlsconfig.Config) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	changed, err := m.putRLSLocked(c)
	if err != nil {
		m.metrics.reload(SourceRLS, resultFailure)
		m.rlsFailing = true
	}
	return changed, err
}

// retryDynamicLocked, called once changed files are in force, has the
// refused dynamic version tried again with them at once (by the refresh
// Run makes when poked), unless applying these very files refused it
// (prior is the refusal before they were applied).
func (m *Manager) retryDynamicLocked(prior *Refusal) {
	if m.refusal == nil || m.cfg.Connect == nil {
		return
	}
	if m.refusal == prior { // refused with other files: try it with these
		m.refusedVersion = 0
	}
	m.poke() // the store may also hold a newer version than the one refused
}

// refuseRLS counts a refused RLS directory and logs it unless the same
// content (or read error), named by key, was already logged.
// maxLoggedWarnings bounds the warnings logged per load: a file may hold
// thousands of misplaced keys, and "limiter rules check" lists them all.
const maxLoggedWarnings = 20

// logRLSWarnings logs the keys of c's files that their meaning does not
// use (rlsconfig.Warning), the first maxLoggedWarnings of them.
func (m *Manager) logRLSWarnings(c *rlsconfig.Config) {
	for i, w := range c.Warnings {
		if i == maxLoggedWarnings {
			m.cfg.Log.Warn("RLS config: more keys not used; limiter rules check --rls-dir lists them all",
				zap.String("dir", m.cfg.RLSDir), zap.Int("more", len(c.Warnings)-i))
			return
		}
		m.cfg.Log.Warn("RLS config: a key not used", zap.String("file", w.File), zap.Int("line", w.Line),
			zap.String("domain", w.Domain), zap.String("descriptor", w.Path), zap.String("key", w.Key), zap.String("why", w.Reason))
	}
}

func (m *Manager) refuseRLS(key string, err error) error {
	m.metrics.reload(SourceRLS, resultFailure)
	m.rlsFailing = true
	if key != m.rlsRefused {
		m.rlsRefused = key
		m.cfg.Log.Error("RLS config refused; the running rules stay", zap.String("dir", m.cfg.RLSDir), zap.Error(err))
	}
	return fmt.Errorf("RLS_CONFIG_DIR %s: %w", m.cfg.RLSDir, err)
}

// refresh connects to the store if need be and reloads the dynamic rules
// when their version moved.
func (m *Manager) refresh(ctx context.Context) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sctx, cancel := context.WithTimeout(ctx, m.cfg.Timeout)
	defer cancel()
	if m.connectLocked(sctx) != nil {
		return
	}
	v, err := m.store.RulesVersion(sctx)
	m.setStoreErr(err)
	if err != nil || v == m.dynVersion || v == m.refusedVersion {
		return
	}
	m.reloadDynamicLocked(sctx)
}

// reloadDynamicLocked loads the dynamic rules and applies them; if they do
// not load or compile the running rules stay.
func (m *Manager) reloadDynamicLocked(ctx context.Context) {
	oldDyn, oldVersion := m.dynamic, m.dynVersion
	if err := m.loadDynamicLocked(ctx); err != nil {
		m.publishRefusalLocked()
		return
	}
	set, digest, err := m.buildLocked(m.dynamic)
	if err != nil {
		refused, atFault := m.dynVersion, m.atFaultLocked(m.dynamic, err)
		m.dynamic, m.dynVersion = oldDyn, oldVersion
		m.refuseDynamicLocked(refused, atFault, err)
		m.publishRefusalLocked()
		return
	}
	m.refusedVersion, m.refusal = 0, nil
	if !m.putLocked(set, digest) {
		m.metrics.reload(SourceDynamic, resultUnchanged)
		m.cfg.Log.Info("dynamic rules changed, the rules in force did not; nothing applied", zap.String("version", m.view.Load().Version))
		return
	}
	m.metrics.reload(SourceDynamic, resultSuccess)
	m.cfg.Log.Info("dynamic rules applied", zap.String("version", m.view.Load().Version))
}

// refuseDynamicLocked counts, logs and remembers a refused version of the
// dynamic rules, atFault naming its rules at fault (called once
// m.dynVersion is the version that stays in force); polls skip it until
// the version moves.
func (m *Manager) refuseDynamicLocked(version int64, atFault []string, err error) {
	m.refusedVersion = version
	m.refusal = &Refusal{Version: version, Rules: atFault, Err: err, At: m.cfg.Now()}
	m.metrics.reload(SourceDynamic, resultFailure)
	m.cfg.Log.Error("dynamic rules refused", zap.Int64("version", version), zap.Strings("rules", atFault),
		zap.Int64("in_force", m.dynVersion), zap.Error(err))
}

// publishRefusalLocked shows the last refusal in the view in force, which
// keeps its rules.
func (m *Manager) publishRefusalLocked() {
	if v := m.view.Load(); v != nil && v.DynamicRefused != m.refusal {
		c := *v
		c.DynamicRefused = m.refusal
		m.view.Store(&c)
	}
}

// atFaultLocked names the rules of dyn, which do not compile with the
// files' rules (err), that do not compile with them alone; when none does,
// the rules err names.
func (m *Manager) atFaultLocked(dyn []dynamicRule, err error) []string {
	var ids []string
	for _, d := range dyn {
		if _, err := m.compileLocked([]dynamicRule{d}); err != nil {
			ids = append(ids, d.rule.ID)
		}
	}
	if len(ids) > 0 {
		return ids
	}
	for _, fe := range rules.FieldErrors(err) {
		if fe.RuleID != "" && !slices.Contains(ids, fe.RuleID) {
			ids = append(ids, fe.RuleID)
		}
	}
	return ids
}

// connectLocked opens the store if it is not open.
func (m *Manager) connectLocked(ctx context.Context) error {
	if m.store != nil {
		return nil
	}
	if m.cfg.Connect == nil {
		return ErrUnavailable
	}
	s, err := m.cfg.Connect(ctx)
	m.setStoreErr(err)
	if err != nil {
		return err
	}
	m.store = s
	return nil
}

// setStoreErr records whether the store answered, logging the transitions.
func (m *Manager) setStoreErr(err error) {
	prev := m.storeErr.Load()
	switch {
	case err == nil && prev != nil:
		m.storeErr.Store(nil)
		m.cfg.Log.Info("dynamic rule store reachable")
	case err != nil && prev == nil:
		m.cfg.Log.Warn("dynamic rule store unavailable; the rules in force stay until it answers", zap.Error(err))
		fallthrough
	case err != nil:
		m.storeErr.Store(&err)
	}
}

// StoreError returns why the rule store did not answer last time, or nil
// (for /readyz: no I/O).
func (m *Manager) StoreError() error {
	if p := m.storeErr.Load(); p != nil {
		return *p
	}
	return nil
}

// loadDynamicLocked reads every dynamic rule; a rule that does not parse
// (stored by a newer version, or by hand) refuses the whole load.
func (m *Manager) loadDynamicLocked(ctx context.Context) error {
	v, stored, err := m.store.DynamicRules(ctx)
	m.setStoreErr(err)
	if err != nil {
		return err
	}
	dyn := make([]dynamicRule, 0, len(stored))
	for _, s := range stored {
		r, err := rules.ParseRuleJSON(s.Rule)
		if err == nil && r.ID != s.ID {
			err = fmt.Errorf("stored under id %q", s.ID)
		}
		if err != nil {
			err = fmt.Errorf("dynamic rule %s: %w", s.ID, err)
			m.refuseDynamicLocked(v, []string{s.ID}, err)
			return err
		}
		dyn = append(dyn, dynamicRule{rule: r, stored: s})
	}
	m.dynamic, m.dynVersion = dyn, v
	return nil
}

// applyFilesLocked puts the files' rules, just loaded, in force merged
// with the dynamic rules. When the two do not compile together the files
// win: the dynamic version is refused and the files' rules run without any
// dynamic rule, as they would after a restart. It fails, changing nothing,
// only when the files' rules alone do not compile. It reports whether the
// rules in force changed (see putLocked).
func (m *Manager) applyFilesLocked() (bool, error) {
	set, digest, err := m.buildLocked(m.dynamic)
	if err != nil && len(m.dynamic) > 0 {
		alone, aloneDigest, aloneErr := m.buildLocked(nil)
		if aloneErr != nil {
			return false, aloneErr
		}
		refused, atFault := m.dynVersion, m.atFaultLocked(m.dynamic, err)
		m.dynamic, m.dynVersion = nil, 0
		m.refuseDynamicLocked(refused, atFault, err)
		set, digest, err = alone, aloneDigest, nil
	}
	if err != nil {
		return false, err
	}
	return m.putLocked(set, digest), nil
}

// compileLocked compiles the file and the RLS directory merged with dyn.
func (m *Manager) compileLocked(dyn []dynamicRule) (*rules.Set, error) {
	return rules.Compile(m.merged(ruleList(dyn)), m.cfg.Options)
}

// buildLocked is compileLocked, with the digest of what it compiles: when
// that is the digest of the rules in force, their set is returned as it is
// rather than compiled again.
func (m *Manager) buildLocked(dyn []dynamicRule) (*rules.Set, string, error) {
	f := m.merged(ruleList(dyn))
	digest := digestOf(f)
	if v := m.view.Load(); v != nil && digest == m.digest {
		return v.Set, digest, nil
	}
	set, err := rules.Compile(f, m.cfg.Options)
	return set, digest, err
}

func ruleList(dyn []dynamicRule) []rules.Rule {
	rs := make([]rules.Rule, len(dyn))
	for i, d := range dyn {
		rs[i] = d.rule
	}
	return rs
}

// putLocked puts set, built from the sources held (digest is digestOf
// their rules), in force, and reports whether that changed the rules in
// force. A set of the digest in force is not applied again: the limiter
// keeps its set, and with it its leases and over-limit cache, and only the
// view moves to the sources' versions (AppliedAt stays when the set was
// applied).
func (m *Manager) putLocked(set *rules.Set, digest string) bool {
	now := m.cfg.Now()
	prev := m.view.Load()
	changed := prev == nil || digest != m.digest
	if changed {
		m.cfg.Apply(set)
		m.digest = digest
	} else {
		now = prev.AppliedAt
	}
	view := m.viewOf(set, now)
	m.view.Store(view)
	m.metrics.applied(view)
	if m.cfg.Report != nil && (prev == nil || prev.Version != view.Version) {
		m.cfg.Report(view.Version, now)
	}
	return changed
}

// merged is the rules file with the RLS directory's rules added, then
// the dynamic rules applied (a dynamic rule replaces the rule of its id).
// A rule of the directory with the id of one of the file is a duplicate,
// which Compile refuses.
func (m *Manager) merged(dyn []rules.Rule) *rules.File {
	base := m.file
	if m.rls != nil && len(m.rls.Rules) > 0 {
		base = &rules.File{Rules: slices.Concat(m.file.Rules, m.rls.Rules), Exempt: m.file.Exempt, Detection: m.file.Detection}
	}
	return rules.Merge(base, dyn)
}

func (m *Manager) viewOf(set *rules.Set, now time.Time) *View {
	v := &View{DynamicVersion: m.dynVersion, File: m.cfg.File, FileHash: m.fileHash[:12], AppliedAt: now, Set: set,
		DynamicRefused: m.refusal}
	v.Version = fmt.Sprintf("%d-%s", v.DynamicVersion, v.FileHash)
	if m.rls != nil {
		v.RLSDir, v.RLSHash = m.cfg.RLSDir, m.rls.Hash[:12]
		v.Version += "-" + v.RLSHash
	}
	inFile := make(map[string]*rules.Rule, len(m.file.Rules))
	for i := range m.file.Rules {
		inFile[m.file.Rules[i].ID] = &m.file.Rules[i]
	}
	inRLS := map[string]*rules.Rule{}
	if m.rls != nil {
		for i := range m.rls.Rules {
			inRLS[m.rls.Rules[i].ID] = &m.rls.Rules[i]
		}
	}
	dyn := make(map[string]*dynamicRule, len(m.dynamic))
	for i := range m.dynamic {
		dyn[m.dynamic[i].rule.ID] = &m.dynamic[i]
	}
	for _, r := range set.Rules() {
		if d, ok := dyn[r.ID]; ok {
			v.Rules = append(v.Rules, RuleView{Rule: d.rule, Source: SourceDynamic, OverridesFile: inFile[r.ID] != nil || inRLS[r.ID] != nil,
				Version: d.stored.Version, UpdatedAt: d.stored.UpdatedAt, UpdatedBy: d.stored.UpdatedBy})
		} else if f, ok := inFile[r.ID]; ok {
			v.Rules = append(v.Rules, RuleView{Rule: *f, Source: SourceFile})
		} else {
			v.Rules = append(v.Rules, RuleView{Rule: *inRLS[r.ID], Source: SourceRLS})
		}
	}
	return v
}

// View returns the rule set in force.
func (m *Manager) View() *View { return m.view.Load() }

// DynamicVersion returns the version of the dynamic rules in force.
func (m *Manager) DynamicVersion() int64 {
	if v := m.view.Load(); v != nil {
		return v.DynamicVersion
	}
	return 0
}

// Put validates body (one rule as JSON, the rules-file schema) exactly as
// the file loader does, then stores it under id, applies it here and
// announces it. An invalid rule returns an *InvalidError and changes
// nothing.
func (m *Manager) Put(ctx context.Context, id string, body []byte, who Author) (Result, error) {
	r, err := rules.ParseRuleJSON(body)
	if err != nil {
		return Result{}, &InvalidError{err}
	}
	if r.ID != id {
		return Result{}, &InvalidError{&rules.FieldError{Field: "id",
			Reason: fmt.Sprintf("%q differs from the id in the path, %q", r.ID, id)}}
	}
	return m.change(ctx, id, func(_ *rules.Rule) (*rules.Rule, error) { return &r, nil }, who)
}

// SetShadow puts the rule id in force (from the file or the store) into
// shadow mode, or out of it, as a dynamic rule.
func (m *Manager) SetShadow(ctx context.Context, id string, shadow bool, who Author) (Result, error) {
	return m.change(ctx, id, func(current *rules.Rule) (*rules.Rule, error) {
		if current == nil {
			return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
		}
		r := *current
		r.Shadow = shadow
		return &r, nil
	}, who)
}

// Delete removes the dynamic rule id; a file rule it overrode comes back.
func (m *Manager) Delete(ctx context.Context, id string, who Author) (Result, error) {
	return m.change(ctx, id, nil, who)
}

// change stores the rule edit returns for id (nil edit: delete), then
// reloads the dynamic rules here and announces the new version.
func (m *Manager) change(ctx context.Context, id string, edit func(current *rules.Rule) (*rules.Rule, error),
	who Author) (Result, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.connectLocked(ctx); err != nil {
		return Result{}, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	var (
		c   Change
		err error
	)
	if edit == nil {
		c, err = m.store.DeleteRule(ctx, id, who)
		if errors.Is(err, ErrNotStored) {
			if m.fileRule(id) != nil {
				return Result{}, fmt.Errorf("%w: %s comes from the rules file, not the API (edit the file, or override it with PUT)", ErrNotFound, id)
			}
			if m.rlsRule(id) != nil {
				return Result{}, fmt.Errorf("%w: %s comes from RLS_CONFIG_DIR, not the API (edit its files, or override it with PUT)", ErrNotFound, id)
			}
			return Result{}, fmt.Errorf("%w: %s", ErrNotFound, id)
		}
	} else {
		var r *rules.Rule
		if r, err = edit(m.currentRule(id)); err != nil {
			return Result{}, err
		}
		if err := m.validateWith(*r); err != nil {
			return Result{}, &InvalidError{err}
		}
		raw, _ := json.Marshal(r)
		c, err = m.store.PutRule(ctx, id, raw, who)
	}
	m.setStoreErr(err)
	if err != nil {
		return Result{}, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	m.cfg.Log.Info("dynamic rule changed", zap.String("rule", id), zap.Int64("version", c.Version),
		zap.String("actor", who.Actor), zap.String("source", who.SourceAddr), zap.Bool("deleted", edit == nil))

	// Committed. Apply it here at once (read your writes), then tell the
	// others; if either fails the pollers catch up.
	m.reloadDynamicLocked(ctx)
	res := Result{Change: c, View: m.view.Load()}
	if m.cfg.Changes != nil {
		if res.AnnounceErr = m.cfg.Changes.Publish(ctx, c.Version); res.AnnounceErr != nil {
			m.cfg.Log.Warn("rule change not announced; the other limiters will poll it", zap.Error(res.AnnounceErr))
		}
	}
	return res, nil
}

// currentRule returns the rule id as its source has it, or nil.
func (m *Manager) currentRule(id string) *rules.Rule {
	for i := range m.dynamic {
		if m.dynamic[i].rule.ID == id {
			return &m.dynamic[i].rule
		}
	}
	if r := m.fileRule(id); r != nil {
		return r
	}
	return m.rlsRule(id)
}

// rlsRule returns the RLS directory's rule id, or nil.
func (m *Manager) rlsRule(id string) *rules.Rule {
	if m.rls == nil {
		return nil
	}
	for i := range m.rls.Rules {
		if m.rls.Rules[i].ID == id {
			return &m.rls.Rules[i]
		}
	}
	return nil
}

func (m *Manager) fileRule(id string) *rules.Rule {
	for i := range m.file.Rules {
		if m.file.Rules[i].ID == id {
			return &m.file.Rules[i]
		}
	}
	return nil
}

// validateWith checks that the rule set in force with r stored compiles.
func (m *Manager) validateWith(r rules.Rule) error {
	dyn := make([]rules.Rule, 0, len(m.dynamic)+1)
	for _, d := range m.dynamic {
		if d.rule.ID != r.ID {
			dyn = append(dyn, d.rule)
		}
	}
	_, err := rules.Compile(m.merged(append(dyn, r)), m.cfg.Options)
	return err
}

func readFile(path string) (*rules.File, string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, "", fmt.Errorf("RULES_FILE: %w", err)
	}
	f, err := rules.Parse(data)
	if err != nil {
		return nil, "", fmt.Errorf("RULES_FILE %s: %w", path, err)
	}
	return f, hashOf(data), nil
}

func hashOf(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}
