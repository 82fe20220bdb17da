// Package archivebench loads the archive the console's benchmarks read:
// BENCH_VIOLATIONS violation rows (10 million) and BENCH_OUTCOMES outcomes
// (1 million) over a week in daily partitions, with 10 000 bans, written by
// Postgres itself (generate_series; about ten minutes on two cores).
//
// By default the rows go into a database of the benchmark's own, dropped
// when it ends. With BENCH_ARCHIVE_DB=name they go into that database,
// which is kept: a later run with the same name and volumes reuses it (its
// migrations brought up to date, so a new index is built on the loaded
// rows) and reads as of the instant it was loaded, so iterating on a page
// does not reload the archive each time. Drop it when done:
// psql -c 'DROP DATABASE name'.
package archivebench

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ratewarden/ratewarden/internal/pgstore"
	"github.com/ratewarden/ratewarden/internal/testkit/benchenv"
	"github.com/ratewarden/ratewarden/internal/testkit/pgtest"
)

// The hot subjects: an address, its /24 and a user, each with many rows.
const (
	IP     = "203.0.113.7"
	Prefix = "203.0.113.0/24"
	User   = "user-42"
)

// Rules is the number of rules the violations are spread over, rule-0 to
// rule-19 (RuleIDs; the load's SQL writes them: keep the two alike).
const Rules = 20

// RuleIDs returns the ids of the rules the violations belong to.
func RuleIDs() []string {
	ids := make([]string, Rules)
	for i := range ids {
		ids[i] = fmt.Sprintf("rule-%d", i)
	}
	return ids
}

// Archive is a loaded archive.
type Archive struct {
	// URL is the database's URL (its owner's).
	URL string
	// Now is the instant the rows lead up to: the benchmark's clock.
	Now time.Time
	// Violations and Outcomes are the rows loaded.
	Violations, Outcomes int
}

// Load returns the benchmark's archive: a fresh one, or the kept
// BENCH_ARCHIVE_DB when it holds the volumes asked for.
func Load(tb testing.TB) Archive {
	tb.Helper()
	a := Archive{
		Violations: benchenv.Int(tb, "BENCH_VIOLATIONS", 10_000_000),
		Outcomes:   benchenv.Int(tb, "BENCH_OUTCOMES", 1_000_000),
	}
	name := benchenv.String("BENCH_ARCHIVE_DB", "")
	if name == "" {
		a.URL = pgtest.Database(tb)
	} else {
		a.URL = kept(tb, name)
		if now, ok := loadedAt(tb, a); ok {
			a.Now = now
			tb.Logf("reusing %s: %d violations and %d outcomes loaded at %s", name, a.Violations, a.Outcomes, now.Format(time.RFC3339))
			return a
		}
	}
	a.Now = time.Now().UTC()
	start := time.Now()
	if err := fill(a); err != nil {
		tb.Fatal(err)
	}
	tb.Logf("loaded %d violations and %d outcomes in %v", a.Violations, a.Outcomes, time.Since(start).Round(time.Second))
	return a
}

// kept returns the URL of the database name, recreated empty unless it
// holds a complete load (one that an interrupted run left is dropped).
func kept(tb testing.TB, name string) string {
	tb.Helper()
	server, err := url.Parse(pgtest.RequiredServerURL(tb))
	if err != nil {
		tb.Fatal(err)
	}
	admin, db := *server, *server
	admin.Path, db.Path = "/postgres", "/"+name
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, admin.String())
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close(ctx)
	var exists, complete bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		tb.Fatal(err)
	}
	if exists {
		complete = hasMarker(ctx, db.String())
		if complete {
			return db.String()
		}
		if _, err := conn.Exec(ctx, "DROP DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			tb.Fatal(err)
		}
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		tb.Fatal(err)
	}
	return db.String()
}

// markerTable records a complete load: written last, so its row means
// every row before it is there.
const markerTable = "bench_archive_load"

func hasMarker(ctx context.Context, db string) bool {
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		return false
	}
	defer conn.Close(ctx)
	var n int
	err = conn.QueryRow(ctx, "SELECT count(*) FROM "+markerTable).Scan(&n)
	return err == nil && n == 1
}

// loadedAt returns the instant of a's complete load, when the database
// holds one of a's volumes; its migrations are brought up to date first.
// A load of other volumes is dropped (its tables truncated) and false
// returned.
func loadedAt(tb testing.TB, a Archive) (time.Time, bool) {
	tb.Helper()
	ctx := context.Background()
	store, err := pgstore.OpenMigrated(ctx, a.URL, nil)
	if err != nil {
		tb.Fatal(err)
	}
	defer store.Close()
	var at time.Time
	var violations, outcomes int
	err = store.Pool().QueryRow(ctx, "SELECT loaded_at, violations, outcomes FROM "+markerTable).Scan(&at, &violations, &outcomes)
	if errors.Is(err, pgx.ErrNoRows) || isUndefinedTable(err) {
		return time.Time{}, false
	}
	if err != nil {
		tb.Fatal(err)
	}
	if violations == a.Violations && outcomes == a.Outcomes {
		// A migration since the load may have built indexes: the
		// statistics of their expressions, and the visibility maps, as
		// after the load.
		if _, err := store.Pool().Exec(ctx, `VACUUM (ANALYZE)`); err != nil {
			tb.Fatal(err)
		}
		return at.UTC(), true
	}
	tb.Logf("%s holds %d violations and %d outcomes: reloading", a.URL, violations, outcomes)
	if _, err := store.Pool().Exec(ctx, "TRUNCATE rate_limit_violations, outcomes, bans; DROP TABLE "+markerTable); err != nil {
		tb.Fatal(err)
	}
	return time.Time{}, false
}

func isUndefinedTable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42P01"
}

// fill makes the schema and the partitions of the week, writes the rows
// and, last, the marker of a complete load.
func fill(a Archive) error {
	ctx := context.Background()
	store, err := pgstore.OpenMigrated(ctx, a.URL, nil)
	if err != nil {
		return err
	}
	defer store.Close()
	for d := 7; d >= 0; d-- {
		if err := store.EnsurePartitions(ctx, a.Now.AddDate(0, 0, -d), 1); err != nil {
			return err
		}
	}
	steps := []struct {
		name, sql string
		args      []any
	}{
		// One violation in 500 is the hot address's, one in 1000 the hot
		// user's; the others spread over 131 072 addresses, 100 000 users
		// and 20 rules; one in ten is a refusal of a banned client.
		{"violations", `INSERT INTO rate_limit_violations (event_id, occurred_at, user_id, ip_address, endpoint, http_method,
			user_tier, rule_id, algorithm, reason, limit_value, current_count, retry_after_ms, shadow, instance)
		SELECT gen_random_uuid(), $2::timestamptz - random() * interval '7 days',
			CASE WHEN i % 1000 = 0 THEN 'user-42' WHEN i % 5 = 0 THEN NULL ELSE 'user-' || (i % 100000) END,
			CASE WHEN i % 500 = 0 THEN '203.0.113.7' WHEN i % 500 = 1 THEN '203.0.113.' || (i % 250)
				ELSE '198.' || (18 + i % 2) || '.' || (i / 7 % 256) || '.' || (i % 256) END::inet,
			'/api/item/' || (i % 1000), 'GET', 'BASIC', 'rule-' || (i % 20), 'fixed_window',
			CASE WHEN i % 10 = 0 THEN 'banned' ELSE 'rate_limited' END, 100, 100, 500, i % 50 = 0, 'limiter-' || (i % 3)
		FROM generate_series(1, $1::bigint) AS i`, []any{a.Violations, a.Now}},
		{"outcomes", `INSERT INTO outcomes (event_id, occurred_at, user_id, ip_address, endpoint, http_method, user_tier,
			status, cost, banned, instance)
		SELECT gen_random_uuid(), $2::timestamptz - random() * interval '7 days',
			CASE WHEN i % 1000 = 0 THEN 'user-42' ELSE 'user-' || (i % 100000) END,
			CASE WHEN i % 500 = 0 THEN '203.0.113.7' ELSE '198.' || (18 + i % 2) || '.' || (i / 7 % 256) || '.' || (i % 256) END::inet,
			'/api/login', 'POST', 'BASIC', CASE WHEN i % 4 = 0 THEN 401 ELSE 200 END, 1, false, 'limiter-' || (i % 3)
		FROM generate_series(1, $1::bigint) AS i`, []any{a.Outcomes, a.Now}},
		{"bans", `INSERT INTO bans (ban_id, ts, action, scope, subject, reason, count, threshold, window_s, duration_s,
			expires_at, source, dry_run, note, actor, evidence)
		SELECT 'bench-' || i, t, CASE WHEN i % 10 = 0 THEN 'unban' ELSE 'ban' END, 'ip',
			CASE WHEN i % 100 = 0 THEN '203.0.113.7' ELSE '198.18.' || (i / 256 % 256) || '.' || (i % 256) END,
			CASE WHEN i % 10 = 0 THEN 'manual' WHEN i % 3 = 0 THEN 'scan' ELSE 'violations_1h' END,
			120, 100, 3600, CASE WHEN i % 10 = 0 THEN 0 ELSE 3600 END,
			CASE WHEN i % 10 = 0 THEN NULL ELSE t + interval '1 hour' END,
			CASE WHEN i % 10 = 0 THEN 'admin' ELSE 'detector' END, false,
			CASE WHEN i % 10 = 0 THEN 'false positive' END, CASE WHEN i % 10 = 0 THEN 'ana' END,
			'{"first_ts": null, "last_ts": null, "sample_endpoints": ["/a", "/b"]}'
		FROM generate_series(1, 10000) AS i, LATERAL (SELECT $1::timestamptz - random() * interval '7 days' AS t) AS r`, []any{a.Now}},
		// Autovacuum would have vacuumed the partitions of the days
		// past (they take no more rows), setting their visibility maps:
		// the console's index-only scans read the index alone there.
		{"vacuum", `VACUUM (ANALYZE)`, nil},
		{"marker", `CREATE TABLE ` + markerTable + ` (loaded_at timestamptz NOT NULL, violations bigint NOT NULL, outcomes bigint NOT NULL)`, nil},
		{"marker row", `INSERT INTO ` + markerTable + ` VALUES ($1, $2, $3)`, []any{a.Now, a.Violations, a.Outcomes}},
	}
	for _, s := range steps {
		if _, err := store.Pool().Exec(ctx, s.sql, s.args...); err != nil {
			return fmt.Errorf("load %s: %w", s.name, err)
		}
	}
	return nil
}
