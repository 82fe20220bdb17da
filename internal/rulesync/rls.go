package rulesync

import (
	"fmt"

	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/rlsconfig"
	"github.com/ratewarden/ratewarden/internal/rules"
)

// rlsSource is the RLS config as last accepted: from Config.RLSDir, or
// from xDS (SetRLS).
type rlsSource struct {
	config  *rlsconfig.Config // nil without RLSDir or xDS
	refused string            // hash of the last RLSDir content refused, reported once
	failing bool              // as fileSource's
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
		m.rls.refused = ""
	}
	files, err := rlsconfig.ReadDir(m.cfg.RLSDir)
	if err != nil {
		return m.refuseRLS("read:"+err.Error(), err)
	}
	hash := rlsconfig.Hash(files)
	if m.rls.config != nil && hash == m.rls.config.Hash && (force || m.rls.failing) {
		m.metrics.reload(SourceRLS, resultUnchanged)
		if !m.rlsAcceptedLocked() {
			m.cfg.Log.Info("RLS config unchanged", zap.String("dir", m.cfg.RLSDir))
		}
		return nil
	}
	if (m.rls.config != nil && hash == m.rls.config.Hash) || hash == m.rls.refused {
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
	m.rls.refused = ""
	if !changed {
		m.cfg.Log.Info("RLS config changed, its rules did not; nothing applied", zap.String("dir", m.cfg.RLSDir),
			zap.String("version", m.merge.view.Load().Version))
		return nil
	}
	m.cfg.Log.Info("RLS config reloaded", zap.String("dir", m.cfg.RLSDir), zap.Int("files", len(c.Files)),
		zap.Int("domains", len(c.Domains)), zap.Int("rules", len(c.Rules)), zap.String("version", m.merge.view.Load().Version))
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
	old := m.rls.config
	m.rls.config = c
	changed, err := m.applyFilesLocked()
	if err != nil {
		m.rls.config = old
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
		m.rls.failing = true
	}
	return changed, err
}

// rlsAcceptedLocked is fileAcceptedLocked for the RLS config.
func (m *Manager) rlsAcceptedLocked() bool {
	if !m.rls.failing {
		return false
	}
	m.rls.failing = false
	m.cfg.Log.Info("RLS config accepted again", zap.String("dir", m.cfg.RLSDir), zap.String("version", m.merge.view.Load().Version))
	return true
}

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

// refuseRLS counts a refused RLS directory and logs it unless the same
// content (or read error), named by key, was already logged.
func (m *Manager) refuseRLS(key string, err error) error {
	m.metrics.reload(SourceRLS, resultFailure)
	m.rls.failing = true
	if key != m.rls.refused {
		m.rls.refused = key
		m.cfg.Log.Error("RLS config refused; the running rules stay", zap.String("dir", m.cfg.RLSDir), zap.Error(err))
	}
	return fmt.Errorf("RLS_CONFIG_DIR %s: %w", m.cfg.RLSDir, err)
}

// rule returns the RLS config's rule id, or nil.
func (s *rlsSource) rule(id string) *rules.Rule {
	if s.config == nil {
		return nil
	}
	for i := range s.config.Rules {
		if s.config.Rules[i].ID == id {
			return &s.config.Rules[i]
		}
	}
	return nil
}
