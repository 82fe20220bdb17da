package rulesync

import (
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/rlsconfig"
)

// rlsSource is the RLS config: read from Config.RLSDir (polled and
// reloaded on SIGHUP), or set by xDS (SetRLS).
type rlsSource struct {
	watched
	// conflicting is the last config from xDS, refused only because it
	// conflicts with the rules file (why): a management server does not
	// send a config again, so it is tried again here once the rules file
	// changes (retryConflicting). Guarded by mu.
	conflicting *rlsconfig.Config
}

func newRLSSource(dir string, log *zap.Logger, m *metrics, merge *merger) *rlsSource {
	return &rlsSource{watched: newWatched(SourceRLS, "RLS config", "RLS_CONFIG_DIR", dir, zap.String("dir", dir), log, m, merge,
		func() (stamp, error) { return statDir(dir) })}
}

// first loads the RLS directory for the start, counting a failure, and
// logs its warnings; without RLSDir it returns nil.
func (s *rlsSource) first() (*rlsconfig.Config, error) {
	if s.path == "" {
		return nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	files, err := s.readLocked()
	var c *rlsconfig.Config
	if err == nil {
		c, err = rlsconfig.Load(files)
	}
	if err != nil {
		s.metrics.reload(SourceRLS, resultFailure)
		return nil, fmt.Errorf("RLS_CONFIG_DIR %s: %w", s.path, err)
	}
	s.logWarnings(c)
	return c, nil
}

// ReloadRLS reads the RLS directory and applies it if its content (names
// and contents of its files) changed; without RLSDir it does nothing. An
// invalid directory is refused (counted, and logged once per content unless
// force) and the running rules stay; a valid one is applied, and a refused
// dynamic version tried again, and one that makes the rules in force is
// counted unchanged, as ReloadFile does.
func (m *Manager) ReloadRLS(force bool) error { return m.rls.reload(force) }

// SetRLS puts c, an RLS config from the xDS management server, in force in
// place of the one before (the rules file and the dynamic rules stay), or
// refuses it with the reason when it does not compile with them: the
// rules in force then stay. Counted as the RLS directory's loads are. It
// reports whether the rules in force changed: a config that makes the
// rules in force (re-published under a new version, its domains in
// another order) is taken without applying them again.
func (m *Manager) SetRLS(c *rlsconfig.Config) (bool, error) { return m.rls.set(c) }

// reload reads the RLS directory and hands it to the merger if its content
// (names and contents of its files) changed, as the rules file's is (see
// watched.reload); without RLSDir it does nothing.
func (s *rlsSource) reload(force bool) error {
	if s.path == "" {
		return nil
	}
	var c *rlsconfig.Config
	changed, v, err := s.watched.reload(force, func() (content, error) {
		files, err := s.readLocked()
		if err != nil {
			return content{}, err
		}
		return content{hash: rlsconfig.Hash(files), put: func() (v *View, changed bool, err error) {
			if c, err = rlsconfig.Load(files); err != nil {
				return nil, false, err
			}
			return s.merge.putRLS(c)
		}}, nil
	})
	if changed {
		s.logWarnings(c)
		s.log.Info("RLS config reloaded", s.where, zap.Int("files", len(c.Files)),
			zap.Int("domains", len(c.Domains)), zap.Int("rules", len(c.Rules)), zap.String("version", v.Version))
	}
	return err
}

// readLocked reads the directory (rlsconfig.ReadDir), recording what stat
// said of it before.
func (s *rlsSource) readLocked() ([]rlsconfig.File, error) {
	st, at := s.check.beforeRead()
	files, err := rlsconfig.ReadDir(s.path)
	s.check.read(st, at, err == nil)
	return files, err
}

// set hands c, an RLS config from xDS, to the merger, counted as the
// directory's loads are; a refusal is not logged (the xDS client answers
// it to the management server and logs it).
func (s *rlsSource) set(c *rlsconfig.Config) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.setLocked(c)
}

func (s *rlsSource) setLocked(c *rlsconfig.Config) (bool, error) {
	v, changed, err := s.merge.putRLS(c)
	s.conflicting, s.why = nil, nil
	if err != nil {
		s.metrics.reload(SourceRLS, resultFailure)
		s.failing = true
		if conflict := (*conflictError)(nil); errors.As(err, &conflict) {
			s.conflicting, s.why = c, conflict
		}
		return false, err
	}
	s.hash = c.Hash
	s.acceptedLocked(resultOf(changed), v)
	if changed {
		s.logWarnings(c)
	}
	return changed, nil
}

// retryConflicting tries again the config from xDS refused for a conflict
// with the rules file, once the rules file held is no longer the one it
// was refused with; it logs the outcome.
func (s *rlsSource) retryConflicting() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conflicting == nil || s.merge.filesHash(s.why.with) == s.why.other {
		return
	}
	c := s.conflicting
	if _, err := s.setLocked(c); err != nil {
		s.log.Error("RLS config from xDS, refused for a conflict with the rules file, refused again after the rules file changed",
			zap.String("hash", c.Hash), zap.Error(err))
		return
	}
	s.log.Info("RLS config from xDS, refused for a conflict with the rules file, applied after the rules file changed",
		zap.String("hash", c.Hash), zap.String("version", s.merge.View().Version))
}

// maxLoggedWarnings bounds the warnings logged per load: a file may hold
// thousands of misplaced keys, and "limiter rules check" lists them all.
const maxLoggedWarnings = 20

// logWarnings logs the keys of c's files that their meaning does not use
// (rlsconfig.Warning), the first maxLoggedWarnings of them.
func (s *rlsSource) logWarnings(c *rlsconfig.Config) {
	for i, w := range c.Warnings {
		if i == maxLoggedWarnings {
			s.log.Warn("RLS config: more keys not used; limiter rules check --rls-dir lists them all",
				s.where, zap.Int("more", len(c.Warnings)-i))
			return
		}
		s.log.Warn("RLS config: a key not used", zap.String("file", w.File), zap.Int("line", w.Line),
			zap.String("domain", w.Domain), zap.String("descriptor", w.Path), zap.String("key", w.Key), zap.String("why", w.Reason))
	}
}
