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
// A delete whose result does not compile (the file rule back in force
// conflicts with another dynamic rule) returns an *InvalidError and changes
// nothing, as an invalid Put does.
func (m *Manager) Delete(ctx context.Context, id string, who Author) (Result, error) {
	return m.change(ctx, id, nil, who)
}

// change stores the rule edit returns for id (nil edit: delete), made
// against the rules in force, then applies the new version here and
// announces it.
func (m *Manager) change(ctx context.Context, id string, edit func(current *rules.Rule) (*rules.Rule, error),
	who Author) (Result, error) {
	c, view, err := m.dyn.write(ctx, id, who, func(dyn []dynamicRule) (json.RawMessage, error) {
		if edit == nil {
			if err := m.merge.validateDelete(dyn, id); err != nil {
				return nil, &InvalidError{err}
			}
			return nil, nil
		}
		r, err := edit(m.merge.rule(dyn, id))
		if err != nil {
			return nil, err
		}
		if err := m.merge.validate(dyn, *r); err != nil {
			return nil, &InvalidError{err}
		}
		return json.Marshal(r)
	})
	if errors.Is(err, ErrNotStored) {
		switch m.merge.filesSource(id) {
		case SourceFile:
			return Result{}, fmt.Errorf("%w: %s comes from the rules file, not the API (edit the file, or override it with PUT)", ErrNotFound, id)
		case SourceRLS:
			return Result{}, fmt.Errorf("%w: %s comes from RLS_CONFIG_DIR, not the API (edit its files, or override it with PUT)", ErrNotFound, id)
		}
		return Result{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return Result{}, err
	}
	// Committed and applied here; tell the others (if that fails their
	// polls catch up).
	res := Result{Change: c, View: view}
	if m.cfg.Changes != nil {
		if res.AnnounceErr = m.cfg.Changes.Publish(ctx, c.Version); res.AnnounceErr != nil {
			m.cfg.Log.Warn("rule change not announced; the other limiters will poll it", zap.Error(res.AnnounceErr))
		}
	}
	return res, nil
}
