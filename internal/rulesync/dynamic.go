package rulesync

import (
	"context"
	"fmt"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/rules"
)

// dynamicRule is a dynamic rule as parsed, with its stored form (its
// version and last author, for the view).
type dynamicRule struct {
	rule   rules.Rule
	stored StoredRule
}

// dynamicSource is the dynamic rules of the store as last accepted.
type dynamicSource struct {
	store    Store
	storeErr atomic.Pointer[error] // nil: the store answered last time
	rules    []dynamicRule
	version  int64
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
	v, err := m.dyn.store.RulesVersion(sctx)
	m.setStoreErr(err)
	if err != nil || v == m.dyn.version || v == m.refusedVersion {
		return
	}
	m.reloadDynamicLocked(sctx)
}

// connectLocked opens the store if it is not open.
func (m *Manager) connectLocked(ctx context.Context) error {
	if m.dyn.store != nil {
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
	m.dyn.store = s
	return nil
}

// setStoreErr records whether the store answered, logging the transitions.
func (m *Manager) setStoreErr(err error) {
	prev := m.dyn.storeErr.Load()
	switch {
	case err == nil && prev != nil:
		m.dyn.storeErr.Store(nil)
		m.cfg.Log.Info("dynamic rule store reachable")
	case err != nil && prev == nil:
		m.cfg.Log.Warn("dynamic rule store unavailable; the rules in force stay until it answers", zap.Error(err))
		fallthrough
	case err != nil:
		m.dyn.storeErr.Store(&err)
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

// loadDynamicLocked reads every dynamic rule; a rule that does not parse
// (stored by a newer version, or by hand) refuses the whole load.
func (m *Manager) loadDynamicLocked(ctx context.Context) error {
	v, stored, err := m.dyn.store.DynamicRules(ctx)
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
	m.dyn.rules, m.dyn.version = dyn, v
	return nil
}

func ruleList(dyn []dynamicRule) []rules.Rule {
	rs := make([]rules.Rule, len(dyn))
	for i, d := range dyn {
		rs[i] = d.rule
	}
	return rs
}

// rule returns the dynamic rule id, or nil.
func (s *dynamicSource) rule(id string) *rules.Rule {
	for i := range s.rules {
		if s.rules[i].rule.ID == id {
			return &s.rules[i].rule
		}
	}
	return nil
}
