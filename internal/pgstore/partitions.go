package pgstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ratewarden/ratewarden/internal/archiver"
)

const (
	partitionLayout = "20060102"
	day             = 24 * time.Hour
)

// partitionedTables are the tables partitioned by UTC day on occurred_at,
// each with a DEFAULT partition named <table>_default (migrations 0001 and
// 0006).
var partitionedTables = [...]string{archiver.ViolationsTable, archiver.OutcomesTable}

// partitionName is the name of the daily partition of table holding the
// UTC day of t: <table>_YYYYMMDD.
func partitionName(table string, t time.Time) string {
	return table + "_" + t.UTC().Format(partitionLayout)
}

// ruleHourlyTable holds the violations counted by UTC hour, rule and
// shadow, kept by a trigger on rate_limit_violations (migration 0010).
const ruleHourlyTable = "violations_by_rule_hourly"

// defaultPartition is the DEFAULT partition of table.
func defaultPartition(table string) string { return table + "_default" }

// EnsurePartitions creates the daily partitions of every partitioned table
// (rate_limit_violations, outcomes) for the UTC days from the day before
// now to ahead days after it, those that do not exist yet. Rows of such a day already caught by the DEFAULT
// partition (clock-skewed events from the future) are moved into the new
// partition in the same transaction. It is idempotent and safe to run from
// several archivers at once (a transaction-level advisory lock serialises
// them).
func (s *Store) EnsurePartitions(ctx context.Context, now time.Time, ahead int) error {
	if ahead < 0 {
		return fmt.Errorf("ensure partitions: ahead is %d, want at least 0", ahead)
	}
	today := now.UTC().Truncate(day)
	for _, table := range partitionedTables {
		for i := -1; i <= ahead; i++ {
			from := today.Add(time.Duration(i) * day)
			if err := s.ensurePartition(ctx, table, from); err != nil {
				return fmt.Errorf("ensure partition %s: %w", partitionName(table, from), err)
			}
		}
	}
	return nil
}

func (s *Store) ensurePartition(ctx context.Context, table string, from time.Time) error {
	name := partitionName(table, from)
	to := from.Add(day)
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", partitionLockKey); err != nil {
			return err
		}
		var exists bool
		if err := tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", name).Scan(&exists); err != nil {
			return err
		}
		if exists {
			return nil
		}
		// Block writers before looking into the DEFAULT partition, so no row
		// for this day can arrive between the look and the DDL (which takes
		// this lock anyway; taking it first keeps the parent-then-partition
		// order of inserts, so no deadlock).
		if _, err := tx.Exec(ctx, "LOCK TABLE "+table+" IN ACCESS EXCLUSIVE MODE"); err != nil {
			return err
		}
		// Bounds are literals in UTC: DDL takes no parameters.
		bounds := fmt.Sprintf("FOR VALUES FROM ('%s') TO ('%s')", from.Format(time.RFC3339), to.Format(time.RFC3339))
		ident := pgx.Identifier{name}.Sanitize()

		var caught bool
		if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+defaultPartition(table)+
			" WHERE occurred_at >= $1 AND occurred_at < $2)", from, to).Scan(&caught); err != nil {
			return err
		}
		if !caught {
			_, err := tx.Exec(ctx, "CREATE TABLE "+ident+" PARTITION OF "+table+" "+bounds)
			return err
		}
		// Creating the partition directly would fail ("updated partition
		// constraint for default partition would be violated"): build it
		// apart, move the rows out of the default partition, then attach.
		_, err := tx.Exec(ctx, "CREATE TABLE "+ident+" (LIKE "+table+" INCLUDING DEFAULTS INCLUDING CONSTRAINTS)")
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, "WITH moved AS (DELETE FROM "+defaultPartition(table)+
			" WHERE occurred_at >= $1 AND occurred_at < $2 RETURNING *) INSERT INTO "+ident+" SELECT * FROM moved", from, to)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, "ALTER TABLE "+table+" ATTACH PARTITION "+ident+" "+bounds)
		return err
	})
}

// DropPartitions drops the daily partitions of every partitioned table
// (rate_limit_violations, outcomes) whose whole day ended at least
// retentionDays days before now, and deletes the rows of their DEFAULT
// partitions older than that, so late events do not outlive the retention
// either, and the hourly counts of violations (violations_by_rule_hourly)
// of the days dropped. It returns the names of the partitions dropped, table by table in
// that order, oldest first. retentionDays below 1 is an error: nothing is
// dropped.
func (s *Store) DropPartitions(ctx context.Context, now time.Time, retentionDays int) ([]string, error) {
	if retentionDays < 1 {
		return nil, fmt.Errorf("drop partitions: retention is %d days, want at least 1", retentionDays)
	}
	cutoff := now.UTC().Add(-time.Duration(retentionDays) * day)
	var dropped []string
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", partitionLockKey); err != nil {
			return err
		}
		for _, table := range partitionedTables {
			names, err := dropPartitions(ctx, tx, table, cutoff)
			dropped = append(dropped, names...)
			if err != nil {
				return err
			}
		}
		// The hourly counts of the days dropped go with them (the first day
		// kept starts at the cutoff's UTC midnight), so they count what the
		// table holds.
		_, err := tx.Exec(ctx, "DELETE FROM "+ruleHourlyTable+" WHERE hour < $1", cutoff.Truncate(day))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("drop partitions: %w", err)
	}
	return dropped, nil
}

// dropPartitions drops, in tx, the daily partitions of table whose day
// ended at or before cutoff and deletes the rows of its DEFAULT partition
// older than cutoff. It returns the names dropped, oldest first.
func dropPartitions(ctx context.Context, tx pgx.Tx, table string, cutoff time.Time) ([]string, error) {
	rows, err := tx.Query(ctx, `SELECT c.relname FROM pg_inherits i
		JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = $1::regclass ORDER BY c.relname`, table)
	if err != nil {
		return nil, err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	var dropped []string
	for _, name := range names {
		dayStart, ok := partitionDay(table, name)
		if !ok || dayStart.Add(day).After(cutoff) {
			continue
		}
		if _, err := tx.Exec(ctx, "DROP TABLE "+pgx.Identifier{name}.Sanitize()); err != nil {
			return dropped, fmt.Errorf("drop %s: %w", name, err)
		}
		dropped = append(dropped, name)
	}
	_, err = tx.Exec(ctx, "DELETE FROM "+defaultPartition(table)+" WHERE occurred_at < $1", cutoff)
	return dropped, err
}

// PruneDeadLetters deletes the dead letters received more than
// retentionDays days ago and returns how many. Their received_at is stamped
// by Postgres, so Postgres's clock judges them, whatever the archiver's
// says. retentionDays below 1 is an error: nothing is deleted.
func (s *Store) PruneDeadLetters(ctx context.Context, retentionDays int) (int64, error) {
	if retentionDays < 1 {
		return 0, fmt.Errorf("prune dead letters: retention is %d days, want at least 1", retentionDays)
	}
	tag, err := s.pool.Exec(ctx, "DELETE FROM dead_letters WHERE received_at < now() - make_interval(days => $1)", retentionDays)
	if err != nil {
		return 0, fmt.Errorf("prune dead letters: %w", err)
	}
	return tag.RowsAffected(), nil
}

// partitionDay parses the day of the name of a daily partition of table;
// ok is false for any other table (the DEFAULT partition, one attached by
// hand).
func partitionDay(table, name string) (time.Time, bool) {
	suffix, ok := strings.CutPrefix(name, table+"_")
	if !ok || len(suffix) != len(partitionLayout) {
		return time.Time{}, false
	}
	t, err := time.Parse(partitionLayout, suffix)
	return t, err == nil
}
