// Package archivequery reads the Postgres archive for the console: counts
// for the overview, the bans in force with their evidence, a subject's
// timeline and the audit trail. Every query is bounded (a time range on
// the partition column, a LIMIT) and runs in a read-only transaction.
package archivequery

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Reader reads the archive through a pool whose sessions are read-only.
type Reader struct {
	pool *pgxpool.Pool
	// reads holds a token per read in flight: fewer than the pool's
	// connections, so a burst of slow reads leaves connections to Ping (the
	// readiness probe) and the pool never queues a page behind the burst.
	reads chan struct{}
}

// The pool's connections, and how many of them the pages' reads may hold:
// the rest are kept for Ping.
const (
	poolSize = 8
	maxReads = poolSize - 2
)

// busyWait bounds how long a read waits for one of the maxReads: past it,
// the read answers ErrBusy rather than hold its page open.
const busyWait = 2 * time.Second

// ErrBusy is a read refused because maxReads others are in flight.
var ErrBusy = errors.New("the archive is busy with other reads: try again in a moment")

// acquire takes one of the reads in flight, waiting at most busyWait; call
// release when the read is done.
func (r *Reader) acquire(ctx context.Context) (release func(), err error) {
	wait := time.NewTimer(busyWait)
	defer wait.Stop()
	select {
	case r.reads <- struct{}{}:
		return func() { <-r.reads }, nil
	case <-wait.C:
		return nil, ErrBusy
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// ReaderRole is the read-only role the archiver's migrations create; the
// console's sessions take it.
const ReaderRole = "ratewarden_reader"

// Open connects to the archive at url. Every session takes ReaderRole (SET
// ROLE), so the login role must be a member of it (or a superuser, as in a
// local run), and is read-only besides (default_transaction_read_only): a
// login role with more privileges reads with the reader's only.
func Open(ctx context.Context, url string) (*Reader, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse the database URL: %w", err)
	}
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		if _, err := conn.Exec(ctx, "SET ROLE "+ReaderRole); err != nil {
			return fmt.Errorf("take the role %s (the login role must be a member of it): %w", ReaderRole, err)
		}
		return nil
	}
	cfg.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
	cfg.ConnConfig.RuntimeParams["application_name"] = "ratewarden-console"
	cfg.ConnConfig.RuntimeParams["statement_timeout"] = "5000"
	cfg.MaxConns = poolSize
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return &Reader{pool: pool, reads: make(chan struct{}, maxReads)}, nil
}

// Close closes the pool.
func (r *Reader) Close() { r.pool.Close() }

// Ping checks the database answers. It takes none of the pages' reads, and
// the pool keeps connections the reads cannot hold: a burst of slow pages
// does not make the console look unready.
func (r *Reader) Ping(ctx context.Context) error { return r.pool.Ping(ctx) }

// Count is a labelled count, one bar of a chart.
type Count struct {
	Label string
	N     int64
}

// counts runs a query of (label, count) rows.
func (r *Reader) counts(ctx context.Context, query string, args ...any) ([]Count, error) {
	rows, err := r.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Count, error) {
		var c Count
		err := row.Scan(&c.Label, &c.N)
		return c, err
	})
}

// Overview is the first page's numbers.
type Overview struct {
	BansHour, BansDay []Count // bans issued, by scenario (reason)
	DenialsByRule     []Count // requests refused in the last hour, by rule
	ActiveBans        int64
}

// maxBars bounds the bars of one chart: the rest are summed in "other".
const maxBars = 12

// Overview counts the bans of the last hour and day by scenario and the
// denials of the last hour by rule, as of now.
func (r *Reader) Overview(ctx context.Context, now time.Time) (Overview, error) {
	var o Overview
	release, err := r.acquire(ctx)
	if err != nil {
		return o, err
	}
	defer release()
	const bans = `SELECT reason, count(*) FROM bans
		WHERE action = 'ban' AND NOT dry_run AND ts >= $1 AND ts <= $2
		GROUP BY reason ORDER BY 2 DESC, 1 LIMIT $3`
	if o.BansHour, err = r.counts(ctx, bans, now.Add(-time.Hour), now, maxBars); err != nil {
		return o, fmt.Errorf("bans of the hour: %w", err)
	}
	if o.BansDay, err = r.counts(ctx, bans, now.Add(-24*time.Hour), now, maxBars); err != nil {
		return o, fmt.Errorf("bans of the day: %w", err)
	}
	if o.DenialsByRule, err = r.counts(ctx, `SELECT rule_id, count(*) FROM rate_limit_violations
		WHERE occurred_at >= $1 AND occurred_at <= $2 AND NOT shadow
		GROUP BY rule_id ORDER BY 2 DESC, 1 LIMIT $3`, now.Add(-time.Hour), now, maxBars); err != nil {
		return o, fmt.Errorf("denials by rule: %w", err)
	}
	if err := r.pool.QueryRow(ctx, `SELECT count(*) FROM active_bans`).Scan(&o.ActiveBans); err != nil {
		return o, fmt.Errorf("active bans: %w", err)
	}
	return o, nil
}

// RuleDenials counts the requests each of the rules ids refused between
// from and to (shadow rules' would-be refusals apart), so that what the
// page reads is bounded by the rules it shows, whatever rule ids the
// decision topic carried: the whole UTC hours between them
// from the hourly counts the archive keeps (violations_by_rule_hourly), the
// part-hours at either end from the violations themselves, so the sum is
// what counting every violation of the range would give, for a fraction of
// the rows read.
func (r *Reader) RuleDenials(ctx context.Context, from, to time.Time, ids []string) (map[string]int64, error) {
	if len(ids) == 0 {
		return map[string]int64{}, nil
	}
	release, err := r.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	first, last := wholeHours(from, to)
	// Two scans of the violations rather than one with OR: each is an
	// index-only range scan of (occurred_at) INCLUDE (rule_id, shadow).
	counts, err := r.counts(ctx, `SELECT rule_id, sum(n)::bigint FROM (
			SELECT rule_id, n FROM violations_by_rule_hourly
			WHERE hour >= $3 AND hour < $4 AND NOT shadow AND rule_id = ANY($5)
			UNION ALL
			SELECT rule_id, count(*) FROM rate_limit_violations
			WHERE occurred_at >= $1 AND occurred_at < $3 AND NOT shadow AND rule_id = ANY($5) GROUP BY rule_id
			UNION ALL
			SELECT rule_id, count(*) FROM rate_limit_violations
			WHERE occurred_at >= $4 AND occurred_at < $2 AND NOT shadow AND rule_id = ANY($5) GROUP BY rule_id
		) AS parts GROUP BY rule_id`, from, to, first, last, ids)
	if err != nil {
		return nil, fmt.Errorf("denials by rule: %w", err)
	}
	out := make(map[string]int64, len(counts))
	for _, c := range counts {
		out[c.Label] = c.N
	}
	return out, nil
}

// wholeHours returns the whole UTC hours of [from, to) as [first, last):
// first is from rounded up to the hour, last is to rounded down. When no
// whole hour fits, first = last = to, so the violations of [from, to) are
// counted one by one and no hour from the hourly counts.
func wholeHours(from, to time.Time) (first, last time.Time) {
	// Truncate works on the absolute instant: whole hours of UTC (and of
	// every zone a whole number of hours away from it), as the counts'
	// date_trunc('hour', occurred_at, 'UTC').
	first, last = from.Truncate(time.Hour), to.Truncate(time.Hour)
	if first.Before(from) {
		first = first.Add(time.Hour)
	}
	if !first.Before(last) {
		return to, to
	}
	return first, last
}
