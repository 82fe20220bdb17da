// The admin API's changes: validated as the file loader validates, stored
// with their audit row, applied here at once and announced.

package rulesync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/rules"
)

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
		c, err = m.dyn.store.DeleteRule(ctx, id, who)
		if errors.Is(err, ErrNotStored) {
			if m.file.rule(id) != nil {
				return Result{}, fmt.Errorf("%w: %s comes from the rules file, not the API (edit the file, or override it with PUT)", ErrNotFound, id)
			}
			if m.rls.rule(id) != nil {
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
		c, err = m.dyn.store.PutRule(ctx, id, raw, who)
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
	res := Result{Change: c, View: m.merge.view.Load()}
	if m.cfg.Changes != nil {
		if res.AnnounceErr = m.cfg.Changes.Publish(ctx, c.Version); res.AnnounceErr != nil {
			m.cfg.Log.Warn("rule change not announced; the other limiters will poll it", zap.Error(res.AnnounceErr))
		}
	}
	return res, nil
}

// currentRule returns the rule id as its source has it, or nil.
func (m *Manager) currentRule(id string) *rules.Rule {
	if r := m.dyn.rule(id); r != nil {
		return r
	}
	if r := m.file.rule(id); r != nil {
		return r
	}
	return m.rls.rule(id)
}

// validateWith checks that the rule set in force with r stored compiles.
func (m *Manager) validateWith(r rules.Rule) error {
	dyn := make([]rules.Rule, 0, len(m.dyn.rules)+1)
	for _, d := range m.dyn.rules {
		if d.rule.ID != r.ID {
			dyn = append(dyn, d.rule)
		}
	}
	_, err := rules.Compile(m.merged(append(dyn, r)), m.cfg.Options)
	return err
}
