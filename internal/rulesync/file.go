package rulesync

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"

	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/rules"
)

// fileSource is the rules file (Config.File) as last accepted.
type fileSource struct {
	parsed  *rules.File
	hash    string
	refused string // hash of the last file content refused, reported once
	// failing: the last load was refused, so the next that is not says so
	// (its content may be the one in force again, which is not applied
	// again).
	failing bool
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
		m.file.refused = ""
	}
	data, err := os.ReadFile(m.cfg.File)
	if err != nil {
		return m.refuseFile("read:"+err.Error(), err)
	}
	hash := hashOf(data)
	if hash == m.file.hash && (force || m.file.failing) {
		// The content in force: after a refusal (the bad edit undone) it
		// is accepted again, and the gauge must say so.
		m.metrics.reload(SourceFile, resultUnchanged)
		if !m.fileAcceptedLocked() {
			m.cfg.Log.Info("rules file unchanged", zap.String("file", m.cfg.File))
		}
		return nil
	}
	if hash == m.file.hash || hash == m.file.refused {
		return nil
	}
	f, err := rules.Parse(data)
	if err != nil {
		return m.refuseFile(hash, err)
	}
	prior := m.refusal
	old, oldHash := m.file.parsed, m.file.hash
	m.file.parsed, m.file.hash = f, hash
	changed, err := m.applyFilesLocked()
	if err != nil {
		m.file.parsed, m.file.hash = old, oldHash
		return m.refuseFile(hash, err)
	}
	m.file.refused = ""
	m.metrics.reload(SourceFile, resultOf(changed))
	m.fileAcceptedLocked()
	if !changed {
		m.cfg.Log.Info("rules file changed, its rules did not; nothing applied", zap.String("file", m.cfg.File),
			zap.String("version", m.merge.view.Load().Version))
		return nil
	}
	m.cfg.Log.Info("rules file reloaded", zap.String("file", m.cfg.File), zap.String("version", m.merge.view.Load().Version))
	m.retryDynamicLocked(prior)
	return nil
}

// refuseFile counts a refused file and logs it unless the same content (or
// read error), named by key, was already logged.
func (m *Manager) refuseFile(key string, err error) error {
	m.metrics.reload(SourceFile, resultFailure)
	m.file.failing = true
	if key != m.file.refused {
		m.file.refused = key
		m.cfg.Log.Error("rules file refused; the running rules stay", zap.String("file", m.cfg.File), zap.Error(err))
	}
	return fmt.Errorf("RULES_FILE %s: %w", m.cfg.File, err)
}

// fileAcceptedLocked, once a load of the rules file is not refused, logs
// that the file is accepted again when the load before it was refused, and
// reports whether it did.
func (m *Manager) fileAcceptedLocked() bool {
	if !m.file.failing {
		return false
	}
	m.file.failing = false
	m.cfg.Log.Info("rules file accepted again", zap.String("file", m.cfg.File), zap.String("version", m.merge.view.Load().Version))
	return true
}

// rule returns the rules file's rule id, or nil.
func (s *fileSource) rule(id string) *rules.Rule {
	for i := range s.parsed.Rules {
		if s.parsed.Rules[i].ID == id {
			return &s.parsed.Rules[i]
		}
	}
	return nil
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
