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
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ratewarden/ratewarden/internal/pgstore"
	"github.com/ratewarden/ratewarden/internal/rulesync"
)

// Store is the limiters' dynamic rule store.
var _ rulesync.Store = (*Store)(nil)

// Store is the dynamic rule store on a pgstore connection pool.
type Store struct {
	db   *pgstore.Store
	pool *pgxpool.Pool
	// commit commits a change's transaction: tx.Commit, but in the tests
	// that lose its answer.
	commit func(ctx context.Context, tx pgx.Tx) error
}

// New returns the dynamic rule store of the database db is connected to;
// db must have been migrated (pgstore.Store.Migrate). Close closes db.
func New(db *pgstore.Store) *Store {
	return &Store{db: db, pool: db.Pool(), commit: func(ctx context.Context, tx pgx.Tx) error { return tx.Commit(ctx) }}
}

// readBackTimeout bounds the read-back of a change whose commit failed,
// made on a context of its own: the caller's may be what ended.
const readBackTimeout = 5 * time.Second

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
		func(tx pgx.Tx) (err error) {
			version, out, err = readSet(ctx, tx, "SELECT version FROM dynamic_rules_version")
			return err
		})
	if err != nil {
		return 0, nil, fmt.Errorf("read dynamic rules: %w", err)
	}
	return version, out, nil
}

// readSet reads the version with versionQuery, then the rules.
func readSet(ctx context.Context, tx pgx.Tx, versionQuery string) (int64, []rulesync.StoredRule, error) {
	var version int64
	if err := tx.QueryRow(ctx, versionQuery).Scan(&version); err != nil {
		return 0, nil, err
	}
	rows, err := tx.Query(ctx, "SELECT rule_id, rule, version, updated_at, updated_by FROM dynamic_rules ORDER BY rule_id")
	if err != nil {
		return 0, nil, err
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (rulesync.StoredRule, error) {
		var r rulesync.StoredRule
		err := row.Scan(&r.ID, &r.Rule, &r.Version, &r.UpdatedAt, &r.UpdatedBy)
		return r, err
	})
	return version, out, err
}

// Change makes a change of the rule id in one transaction: prepare, given
// the set and its version as they stand while no other change can be
// made, returns the rule to store (nil: delete it); the rule, a new set
// version and the audit row are then written. prepare's error is returned
// as it is, and nothing changes; rulesync.ErrNotStored when deleting a rule
// that is not stored.
func (s *Store) Change(ctx context.Context, id string, who rulesync.Author, prepare rulesync.Prepare) (rulesync.Change, error) {
	var (
		c          rulesync.Change
		refusedErr error // prepare's
	)
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		// The version row's lock, taken first, serializes changes: the set
		// prepare validates against is the one the change lands on, and
		// the before image and the version order agree.
		version, stored, err := readSet(ctx, tx, "SELECT version FROM dynamic_rules_version FOR UPDATE")
		if err != nil {
			return err
		}
		after, err := prepare(version, stored)
		if err != nil {
			refusedErr = err
			return err
		}
		i := slices.IndexFunc(stored, func(r rulesync.StoredRule) bool { return r.ID == id })
		if i >= 0 {
			c.Before = stored[i].Rule
		}
		action := "put"
		if after == nil {
			if i < 0 {
				return rulesync.ErrNotStored
			}
			action = "delete"
		}
		err = tx.QueryRow(ctx, `UPDATE dynamic_rules_version SET version = version + 1, changed_at = clock_timestamp()
			RETURNING version, changed_at`).Scan(&c.Version, &c.ChangedAt)
		if err != nil {
			return err
		}
		if after == nil {
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
	var commitErr *commitError
	switch {
	case refusedErr != nil:
		return rulesync.Change{}, refusedErr
	case errors.Is(err, rulesync.ErrNotStored):
		return rulesync.Change{}, err
	case errors.As(err, &commitErr):
		return s.readBack(c, id, commitErr.err)
	case err != nil:
		return rulesync.Change{}, fmt.Errorf("change dynamic rule %s: %w", id, err)
	}
	return c, nil
}

// commitError is a failed commit: the change may have been stored.
type commitError struct{ err error }

func (e *commitError) Error() string { return "commit: " + e.err.Error() }

// inTx runs fn in a transaction and commits it (s.commit); a failed commit
// is a *commitError.
func (s *Store) inTx(ctx context.Context, fn func(pgx.Tx) error) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after a commit, a no-op
	if err := fn(tx); err != nil {
		return err
	}
	if err := s.commit(ctx, tx); err != nil {
		return &commitError{err}
	}
	return nil
}

// readBack tells whether change c of id, whose commit failed with
// commitErr (a deadline, a connection lost while COMMIT was on its way),
// was stored: by its audit row, which only its transaction writes (the
// version alone could be another change's made since, after ours rolled
// back). Stored: c, as if the commit had answered; not stored: the
// commit's error; unknown: rulesync.ErrOutcomeUnknown.
func (s *Store) readBack(c rulesync.Change, id string, commitErr error) (rulesync.Change, error) {
	ctx, cancel := context.WithTimeout(context.Background(), readBackTimeout)
	defer cancel()
	var stored bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM rule_changes
		WHERE version = $1 AND rule_id = $2 AND changed_at = $3)`, c.Version, id, c.ChangedAt).Scan(&stored)
	switch {
	case err != nil:
		return rulesync.Change{}, fmt.Errorf("change dynamic rule %s: %w (commit: %v; reading it back: %v)", id, rulesync.ErrOutcomeUnknown, commitErr, err)
	case stored:
		return c, nil
	}
	return rulesync.Change{}, fmt.Errorf("change dynamic rule %s: commit: %w", id, commitErr)
}

// jsonOrNil passes an absent image as SQL NULL rather than JSON null.
func jsonOrNil(b json.RawMessage) any {
	if b == nil {
		return nil
	}
	return string(b)
}
