package rulesync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/rules"
)

// dynamicSource is the rule store (Config.Connect): it connects, loads the
// dynamic rules when their version moves (polled, or announced), makes the
// admin API's writes, and hands each version it loads to the merger.
type dynamicSource struct {
	connect func(ctx context.Context) (Store, error) // nil: no dynamic rules
	timeout time.Duration
	log     *zap.Logger
	merge   *merger
	// wake is signalled by announcements: a refresh is due.
	wake     chan struct{}
	storeErr atomic.Pointer[error] // nil: the store answered last time

	mu    sync.Mutex // serializes connecting, loads and writes
	store Store
}

// first loads the dynamic rules for the start, when the store answers
// within the timeout; nil when it does not (logged: the files' rules run
// until it answers) or without a store.
func (s *dynamicSource) first(ctx context.Context) *dynamicRules {
	if s.connect == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if s.connectLocked(ctx) != nil {
		return nil
	}
	d, _ := s.loadLocked(ctx)
	return d
}

// refresh connects to the store if need be and, when the version of the
// dynamic rules moved to one the merger wants, loads them and hands them
// to it.
func (s *dynamicSource) refresh(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if s.connectLocked(ctx) != nil {
		return
	}
	_, _ = s.catchUpLocked(ctx)
}

// catchUpLocked hands the merger the store's version when it is one the
// merger wants: neither the version in force nor one it refused. It
// returns the version the store holds.
func (s *dynamicSource) catchUpLocked(ctx context.Context) (int64, error) {
	v, err := s.store.RulesVersion(ctx)
	s.setStoreErr(err)
	if err != nil {
		return 0, err
	}
	if s.merge.wants(v) {
		s.reloadLocked(ctx)
	}
	return v, nil
}

// subscribe has a refresh made on every announcement of a version other
// than the one in force, and after a reconnection (announcements may have
// been missed), until ctx ends.
func (s *dynamicSource) subscribe(ctx context.Context, changes Announcer) {
	_ = changes.Subscribe(ctx, func(v int64) {
		if v != s.merge.dynamicVersion() {
			s.poke()
		}
	}, s.poke)
}

func (s *dynamicSource) poke() {
	select {
	case s.wake <- struct{}{}:
	default: // a refresh is already due
	}
}

// close closes the store if it is open.
func (s *dynamicSource) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.store != nil {
		s.store.Close()
	}
}

// connectLocked opens the store if it is not open.
func (s *dynamicSource) connectLocked(ctx context.Context) error {
	if s.store != nil {
		return nil
	}
	if s.connect == nil {
		return ErrUnavailable
	}
	st, err := s.connect(ctx)
	s.setStoreErr(err)
	if err != nil {
		return err
	}
	s.store = st
	return nil
}

// setStoreErr records whether the store answered, logging the transitions.
func (s *dynamicSource) setStoreErr(err error) {
	prev := s.storeErr.Load()
	switch {
	case err == nil && prev != nil:
		s.storeErr.Store(nil)
		s.log.Info("dynamic rule store reachable")
	case err != nil && prev == nil:
		s.log.Warn("dynamic rule store unavailable; the rules in force stay until it answers", zap.Error(err))
		fallthrough
	case err != nil:
		s.storeErr.Store(&err)
	}
}

// StoreError returns why the rule store did not answer last time, or nil
// (for /readyz: no I/O).
func (m *Manager) StoreError() error {
	if p := m.dyn.storeErr.Load(); p != nil {
		return *p
	}
	return nil
}

// reloadLocked loads the dynamic rules and hands them to the merger, which
// applies or refuses them; if the store does not answer the running rules
// stay.
func (s *dynamicSource) reloadLocked(ctx context.Context) {
	if d, err := s.loadLocked(ctx); err == nil {
		s.merge.putDynamic(d)
	}
}

// writeAttempts bounds how many times a change is made again because
// another limiter changed the set between its validation and its write.
const writeAttempts = 3

// write makes an admin change, one at a time on this instance: prepare,
// called once the store is open and its latest version is in the merger
// (so that a limiter that missed an announcement validates against what
// the store holds, not against what it last heard), returns the rule to
// store under id as JSON (nil: delete the rule id) or why not; the change
// is stored only if the set is still at the version it was prepared
// against, else prepared again against the new one (writeAttempts in
// all), then the new version loaded and handed to the merger at once (read
// your writes). It returns the change and the view in force after it. The
// store not answering is ErrUnavailable; deleting a rule it does not hold,
// ErrNotStored; a set changed under every attempt, ErrConflict. The write
// is bounded by the source's timeout as well as by ctx: it holds the
// source's lock, which the store's polls wait for.
func (s *dynamicSource) write(ctx context.Context, id string, who Author, prepare func() (json.RawMessage, error)) (Change, *View, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if err := s.connectLocked(ctx); err != nil {
		return Change{}, nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	var c Change
	for attempt := 1; ; attempt++ {
		base, err := s.catchUpLocked(ctx)
		if err != nil {
			return Change{}, nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		raw, err := prepare()
		if err != nil {
			return Change{}, nil, err
		}
		if raw == nil {
			c, err = s.store.DeleteRule(ctx, id, who, base)
		} else {
			c, err = s.store.PutRule(ctx, id, raw, who, base)
		}
		switch {
		case errors.Is(err, ErrVersionMoved) && attempt < writeAttempts:
			continue
		case errors.Is(err, ErrVersionMoved):
			return Change{}, nil, ErrConflict
		case errors.Is(err, ErrNotStored):
			return Change{}, nil, err
		}
		s.setStoreErr(err)
		if err != nil {
			return Change{}, nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		break
	}
	s.log.Info("dynamic rule changed", zap.String("rule", id), zap.Int64("version", c.Version),
		zap.String("actor", who.Actor), zap.String("source", who.SourceAddr), zap.Bool("deleted", c.After == nil))
	s.reloadLocked(ctx)
	return c, s.merge.View(), nil
}

// loadLocked reads every dynamic rule; a rule that does not parse (stored
// by a newer version, or by hand) refuses the whole version.
func (s *dynamicSource) loadLocked(ctx context.Context) (*dynamicRules, error) {
	v, stored, err := s.store.DynamicRules(ctx)
	s.setStoreErr(err)
	if err != nil {
		return nil, err
	}
	d := &dynamicRules{version: v, rules: make([]dynamicRule, 0, len(stored))}
	for _, st := range stored {
		r, err := rules.ParseRuleJSON(st.Rule)
		if err == nil && r.ID != st.ID {
			err = fmt.Errorf("stored under id %q", st.ID)
		}
		if err != nil {
			return &dynamicRules{version: v, atFault: []string{st.ID}, err: fmt.Errorf("dynamic rule %s: %w", st.ID, err)}, nil
		}
		d.rules = append(d.rules, dynamicRule{rule: r, stored: st})
	}
	return d, nil
}
