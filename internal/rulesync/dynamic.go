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
	s.catchUpLocked(ctx)
}

// catchUpLocked hands the merger the store's version when it is one the
// merger wants: neither the version in force nor one it refused.
func (s *dynamicSource) catchUpLocked(ctx context.Context) {
	v, err := s.store.RulesVersion(ctx)
	s.setStoreErr(err)
	if err != nil || !s.merge.wants(v) {
		return
	}
	s.reloadLocked(ctx)
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

// write makes an admin change, one at a time on this instance, in one
// transaction of the store during which no other change can be made:
// prepare, given the dynamic rules as stored (a limiter validates a change
// against the set it lands on, whatever it heard or refused), returns the
// rule to store under id as JSON (nil: delete the rule id) or why not; the
// store's version is handed to the merger on the way, and the new one at
// once after the change (read your writes). It returns the change and the
// view in force after it. prepare's error is returned as it is; the store
// not answering is ErrUnavailable; deleting a rule it does not hold,
// ErrNotStored. The write is bounded by the source's timeout as well as by
// ctx: it holds the source's lock, which the store's polls wait for.
func (s *dynamicSource) write(ctx context.Context, id string, who Author, prepare func(dyn []dynamicRule) (json.RawMessage, error)) (Change, *View, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if err := s.connectLocked(ctx); err != nil {
		return Change{}, nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	var refused error
	c, err := s.store.Change(ctx, id, who, func(version int64, stored []StoredRule) (json.RawMessage, error) {
		d := parseStored(version, stored)
		if s.merge.wants(version) {
			s.merge.putDynamic(d)
		}
		dyn := d.rules
		if d.err != nil {
			// A stored rule does not parse here (written by a newer
			// version, or by hand): the change is made against the
			// rules in force, so that one can delete or replace it.
			dyn = s.merge.dynamicInForce()
		}
		raw, err := prepare(dyn)
		refused = err
		return raw, err
	})
	switch {
	case refused != nil:
		return Change{}, nil, refused
	case errors.Is(err, ErrNotStored):
		return Change{}, nil, err
	}
	s.setStoreErr(err)
	if err != nil {
		return Change{}, nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	s.log.Info("dynamic rule changed", zap.String("rule", id), zap.Int64("version", c.Version),
		zap.String("actor", who.Actor), zap.String("source", who.SourceAddr), zap.Bool("deleted", c.After == nil))
	s.reloadLocked(ctx)
	return c, s.merge.View(), nil
}

// loadLocked reads every dynamic rule.
func (s *dynamicSource) loadLocked(ctx context.Context) (*dynamicRules, error) {
	v, stored, err := s.store.DynamicRules(ctx)
	s.setStoreErr(err)
	if err != nil {
		return nil, err
	}
	return parseStored(v, stored), nil
}

// parseStored parses the dynamic rules of version v; a rule that does not
// parse (stored by a newer version, or by hand) refuses the whole version.
func parseStored(v int64, stored []StoredRule) *dynamicRules {
	d := &dynamicRules{version: v, rules: make([]dynamicRule, 0, len(stored))}
	for _, st := range stored {
		r, err := rules.ParseRuleJSON(st.Rule)
		if err == nil && r.ID != st.ID {
			err = fmt.Errorf("stored under id %q", st.ID)
		}
		if err != nil {
			return &dynamicRules{version: v, atFault: []string{st.ID}, err: fmt.Errorf("dynamic rule %s: %w", st.ID, err)}
		}
		d.rules = append(d.rules, dynamicRule{rule: r, stored: st})
	}
	return d
}
