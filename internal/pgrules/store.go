// Package pgrules keeps the dynamic rules and their audit trail in
// Postgres (rulesync.Store), in the schema pgstore migrates. It is an
// adapter of its own so that the archiver, which uses pgstore, links no
// rule machinery, and the limiter links no archive.
package pgrules

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ratewarden/ratewarden/internal/pgstore"

	"github.com/jackc/pgx/v5"

	"github.com/ratewarden/ratewarden/internal/rulesync"
)

// Store is the limiters' dynamic rule store.
var _ rulesync.Store = (*Store)(nil)

// Store is the dynamic rule store on a pgstore connection pool.
type Store struct {
	db   *pgstore.Store
	pool *pgxpool.Pool
}

// New returns the dynamic rule store of the database db is connected to;
// db must have been migrated (pgstore.Store.Migrate). Close closes db.
func New(db *pgstore.Store) *Store { return &Store{db: db, pool: db.Pool()} }

// Close closes the connections of the database.
func (s *Store) Close() { s.db.Close() }

// RulesVersion returns the version of the dynamic rule set: cheap enough to
// poll.
func (s *Store) RulesVersion(ctx context.Context) (int64, error) {
	var v int64
	if err := s.pool.QueryRow(ctx, "SELECT version FROM dynamic_rules_version").Scan(&v); err != nil {
		return 0, fmt.Errorf("read dynamic rules version: %w", err)
	}
	return v, nil
}

// DynamicRules returns the dynamic rule set and its version, read in one
// snapshot so the two agree.
func (s *Store) DynamicRules(ctx context.Context) (int64, []rulesync.StoredRule, error) {
	var (
		version int64
		out     []rulesync.StoredRule
	)
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly},
		func(tx pgx.Tx) error {
			if err := tx.QueryRow(ctx, "SELECT version FROM dynamic_rules_version").Scan(&version); err != nil {
				return err
			}
			rows, err := tx.Query(ctx, "SELECT rule_id, rule, version, updated_at, updated_by FROM dynamic_rules ORDER BY rule_id")
			if err != nil {
				return err
			}
			out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (rulesync.StoredRule, error) {
				var r rulesync.StoredRule
				err := row.Scan(&r.ID, &r.Rule, &r.Version, &r.UpdatedAt, &r.UpdatedBy)
				return r, err
			})
			return err
		})
	if err != nil {
		return 0, nil, fmt.Errorf("read dynamic rules: %w", err)
	}
	return version, out, nil
}

// PutRule stores rule (valid JSON of one rule) under id, with a new set
// version and its audit row, in one transaction, if the set is at version
// base; rulesync.ErrVersionMoved when it is not.
func (s *Store) PutRule(ctx context.Context, id string, rule json.RawMessage, who rulesync.Author, base int64) (rulesync.Change, error) {
	return s.change(ctx, id, "put", rule, who, base)
}

// DeleteRule removes the dynamic rule id, with a new set version and its
// audit row, if the set is at version base; rulesync.ErrVersionMoved when
// it is not, rulesync.ErrNotStored when the rule is not stored.
func (s *Store) DeleteRule(ctx context.Context, id string, who rulesync.Author, base int64) (rulesync.Change, error) {
	return s.change(ctx, id, "delete", nil, who, base)
}

func (s *Store) change(ctx context.Context, id, action string, after json.RawMessage, who rulesync.Author, base int64) (rulesync.Change, error) {
	var c rulesync.Change
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		// Taking the version row's lock first serializes changes, so the
		// before image and the version order agree; the change applies
		// only to the version it was validated against.
		err := tx.QueryRow(ctx, `UPDATE dynamic_rules_version SET version = version + 1, changed_at = clock_timestamp()
			WHERE version = $1 RETURNING version, changed_at`, base).Scan(&c.Version, &c.ChangedAt)
		if errors.Is(err, pgx.ErrNoRows) {
			return rulesync.ErrVersionMoved
		}
		if err != nil {
			return err
		}
		err = tx.QueryRow(ctx, "SELECT rule FROM dynamic_rules WHERE rule_id = $1", id).Scan(&c.Before)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			if action == "delete" {
				return rulesync.ErrNotStored
			}
		case err != nil:
			return err
		}
		if action == "delete" {
			_, err = tx.Exec(ctx, "DELETE FROM dynamic_rules WHERE rule_id = $1", id)
		} else {
			c.After = after
			_, err = tx.Exec(ctx, `INSERT INTO dynamic_rules (rule_id, rule, version, updated_at, updated_by)
				VALUES ($1, $2, $3, $4, $5)
				ON CONFLICT (rule_id) DO UPDATE SET rule = EXCLUDED.rule, version = EXCLUDED.version,
					updated_at = EXCLUDED.updated_at, updated_by = EXCLUDED.updated_by`,
				id, string(after), c.Version, c.ChangedAt, who.Actor)
		}
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO rule_changes
			(version, rule_id, action, actor, source_addr, instance, changed_at, before, after)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
			c.Version, id, action, who.Actor, who.SourceAddr, who.Instance, c.ChangedAt, jsonOrNil(c.Before), jsonOrNil(c.After))
		return err
	})
	if err != nil {
		if errors.Is(err, rulesync.ErrNotStored) || errors.Is(err, rulesync.ErrVersionMoved) {
			return rulesync.Change{}, err
		}
		return rulesync.Change{}, fmt.Errorf("%s dynamic rule %s: %w", action, id, err)
	}
	return c, nil
}

// jsonOrNil passes an absent image as SQL NULL rather than JSON null.
func jsonOrNil(b json.RawMessage) any {
	if b == nil {
		return nil
	}
	return string(b)
}
