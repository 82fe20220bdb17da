package rulesync

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/rules"
)

// watched is what a source read from disk (the rules file, the RLS
// directory) keeps between its loads: the hash of its content in force,
// and what it refused. Its lock serializes the source's own loads (a
// SIGHUP's and a poll's), so that they reach the merger in order.
type watched struct {
	source  string    // SourceFile or SourceRLS
	what    string    // "rules file" or "RLS config", as logged
	name    string    // RULES_FILE or RLS_CONFIG_DIR, naming its errors
	path    string    // the file or the directory
	where   zap.Field // the path, as logged
	log     *zap.Logger
	metrics *metrics
	merge   *merger

	mu      sync.Mutex
	hash    string // of the content in force
	refused string // hash of the last content refused (or read error, or conflict), reported once
	// conflicted is the hash of the last content refused only for a
	// conflict with the other file source (why): it is skipped while that
	// source's snapshot is the one it was refused with, and tried again
	// once it changes.
	conflicted string
	why        *conflictError
	// failing: the last load was refused, so the next that is not says so
	// (its content may be the one in force again, which is not applied
	// again).
	failing bool
	// check lets a poll skip reading a source that stat says is as it was
	// at its last read (see unchangedCheck).
	check unchangedCheck
}

// newWatched returns the watched state of a source on disk, stat'ed by
// stat between its reads.
func newWatched(source, what, name, path string, where zap.Field, log *zap.Logger, m *metrics, merge *merger,
	stat func() (stamp, error)) watched {
	// The real clock, whatever Config.Now: it is compared with the file
	// system's timestamps.
	return watched{source: source, what: what, name: name, path: path, where: where, log: log, metrics: m, merge: merge,
		check: unchangedCheck{stat: stat, now: time.Now}}
}

// content is one read of a watched source: the hash of what was read, and
// put, which parses it and hands it to the merger.
type content struct {
	hash string
	put  func() (*View, bool, error)
}

// reload reads the source (read) and hands it to the merger if its
// content changed. Content that does not load, or that the merger refuses,
// is counted and logged once per content unless force (an operator's
// SIGHUP hears about it again), and the running rules stay. Content
// refused on its own is not tried again until it changes; content refused
// only because it conflicts with the other file source (a rule id both
// have) is tried again when the other source changes. Content that
// makes the rules in force (a comment changed; or, with force, the same
// content) is counted unchanged and not applied again. It reports whether
// the rules in force changed, and the view then in force.
func (w *watched) reload(force bool, read func() (content, error)) (bool, *View, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if force {
		w.refused, w.conflicted, w.why = "", "", nil
	}
	if !force && !w.conflictDueLocked() && w.check.unchanged() {
		return false, nil, nil // stat says it is as it was at the last read
	}
	c, err := read()
	if err != nil {
		return false, nil, w.refuseLocked("read:"+err.Error(), err)
	}
	if c.hash == w.hash && (force || w.failing) {
		// The content in force: after a refusal (the bad edit undone) it
		// is accepted again, and the gauge must say so.
		if !w.acceptedLocked(resultUnchanged, w.merge.View()) {
			w.log.Info(w.what+" unchanged", w.where)
		}
		return false, nil, nil
	}
	if c.hash == w.hash || c.hash == w.refused {
		return false, nil, nil
	}
	if c.hash == w.conflicted && !w.conflictDueLocked() {
		return false, nil, nil // refused with the other source as it still is
	}
	v, changed, err := c.put()
	var conflict *conflictError
	if errors.As(err, &conflict) {
		w.conflicted, w.why = c.hash, conflict
		return false, nil, w.refuseLocked(c.hash+" with "+conflict.other, err, zap.String("conflicts_with", sourceName(conflict.with)))
	}
	if err != nil {
		return false, nil, w.refuseLocked(c.hash, err)
	}
	w.hash, w.refused, w.conflicted, w.why = c.hash, "", "", nil
	w.acceptedLocked(resultOf(changed), v)
	if !changed {
		w.log.Info(w.what+" changed, its rules did not; nothing applied", w.where, zap.String("version", v.Version))
	}
	return changed, v, nil
}

// conflictDueLocked reports whether content refused for a conflict with
// the other file source is due to be tried again: that source changed.
func (w *watched) conflictDueLocked() bool {
	return w.conflicted != "" && w.merge.filesHash(w.why.with) != w.why.other
}

// started records the content the Manager started on.
func (w *watched) started(hash string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.hash = hash
	w.metrics.reload(w.source, resultSuccess)
}

// refuseLocked counts a refused load and logs it unless the same content
// (or read error), named by key, was already logged.
func (w *watched) refuseLocked(key string, err error, fields ...zap.Field) error {
	w.metrics.reload(w.source, resultFailure)
	w.failing = true
	if key != w.refused {
		w.refused = key
		w.log.Error(w.what+" refused; the running rules stay", append([]zap.Field{w.where, zap.Error(err)}, fields...)...)
	}
	return fmt.Errorf("%s %s: %w", w.name, w.path, err)
}

// acceptedLocked counts a load that was not refused (result) and, when the
// load before it was, logs that the source is accepted again (v is the
// view in force) and reports that it did.
func (w *watched) acceptedLocked(result string, v *View) bool {
	w.metrics.reload(w.source, result)
	if !w.failing {
		return false
	}
	w.failing = false
	w.log.Info(w.what+" accepted again", w.where, zap.String("version", v.Version))
	return true
}

// fileSource is the rules file (Config.File), polled and reloaded on
// SIGHUP.
type fileSource struct{ watched }

func newFileSource(path string, log *zap.Logger, m *metrics, merge *merger) *fileSource {
	return &fileSource{newWatched(SourceFile, "rules file", "RULES_FILE", path, zap.String("file", path), log, m, merge,
		func() (stamp, error) { return statFile(path) })}
}

// first reads the rules file for the start, counting a failure.
func (s *fileSource) first() (*fileRules, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	data, err := s.readLocked()
	if err != nil {
		s.metrics.reload(SourceFile, resultFailure)
		return nil, fmt.Errorf("RULES_FILE: %w", err)
	}
	f, err := rules.Parse(data)
	if err != nil {
		s.metrics.reload(SourceFile, resultFailure)
		return nil, fmt.Errorf("RULES_FILE %s: %w", s.path, err)
	}
	return &fileRules{parsed: f, hash: hashOf(data)}, nil
}

// ReloadFile reads the rules file and applies it if its content changed.
// An invalid file is refused (counted, and logged once per content unless
// force: an operator's SIGHUP hears about it again) and the running rules
// stay. A valid file that conflicts with the dynamic rules in force is
// applied without them (the files win); once a file is applied, a dynamic
// version refused before is tried again. A file that makes the rules in
// force (a comment changed; or, with force, the same content) is counted
// unchanged and not applied again.
//
// An RLS config from xDS refused for a conflict with the rules file before
// is then tried again with the file in force (the management server does
// not send it again).
func (m *Manager) ReloadFile(force bool) error {
	err := m.file.reload(force)
	m.rls.retryConflicting()
	return err
}

// reload reads the rules file and hands it to the merger if its content
// changed (see watched.reload).
func (s *fileSource) reload(force bool) error {
	changed, v, err := s.watched.reload(force, func() (content, error) {
		data, err := s.readLocked()
		if err != nil {
			return content{}, err
		}
		hash := hashOf(data)
		return content{hash: hash, put: func() (*View, bool, error) {
			f, err := rules.Parse(data)
			if err != nil {
				return nil, false, err
			}
			return s.merge.putFile(&fileRules{parsed: f, hash: hash})
		}}, nil
	})
	if changed {
		s.log.Info("rules file reloaded", s.where, zap.String("version", v.Version))
	}
	return err
}

// readLocked reads the rules file (readRulesFile), recording what stat
// said of it before.
func (s *fileSource) readLocked() ([]byte, error) {
	st, at := s.check.beforeRead()
	data, err := readRulesFile(s.path)
	s.check.read(st, at, err == nil)
	return data, err
}

func hashOf(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}
