package archivequery

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/pgstore"
	"github.com/ratewarden/ratewarden/internal/testkit/benchenv"
	"github.com/ratewarden/ratewarden/internal/testkit/pgtest"
)

// The console's reads at the volumes it must serve: BENCH_VIOLATIONS
// violation rows (10 million) and BENCH_OUTCOMES outcomes (1 million) over
// a week in daily partitions, with 10 000 bans, loaded once per run in a
// database of its own, dropped at the end (several minutes: the rows are
// written by Postgres itself, generate_series). A benchmark with
// sub-benchmarks runs once, so the rows are loaded once. Every page reads less than that: a range on
// the partition column and an index.
//
//	go test ./internal/archivequery/ -run '^$' -bench Pages -benchtime 20x

// The hot subjects: an address, its /24 and a user, each with many rows.
const (
	benchIP     = "203.0.113.7"
	benchPrefix = "203.0.113.0/24"
	benchUser   = "user-42"
)

// loadBenchArchive fills a database of the benchmark's own and returns a
// reader of it, and the instant the rows lead up to.
func loadBenchArchive(b *testing.B) (*Reader, time.Time) {
	b.Helper()
	violations := benchenv.Int(b, "BENCH_VIOLATIONS", 10_000_000)
	outcomes := benchenv.Int(b, "BENCH_OUTCOMES", 1_000_000)
	db := pgtest.Database(b)
	now := time.Now().UTC()
	start := time.Now()
	if err := fillBench(db, now, violations, outcomes); err != nil {
		b.Fatal(err)
	}
	b.Logf("loaded %d violations and %d outcomes in %v", violations, outcomes, time.Since(start).Round(time.Second))
	r, err := Open(context.Background(), db)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(r.Close)
	return r, now
}

// fillBench makes the schema and the partitions of the week, and writes the
// rows.
func fillBench(db string, now time.Time, violations, outcomes int) error {
	ctx := context.Background()
	store, err := pgstore.OpenMigrated(ctx, db, nil)
	if err != nil {
		return err
	}
	defer store.Close()
	for d := 7; d >= 0; d-- {
		if err := store.EnsurePartitions(ctx, now.AddDate(0, 0, -d), 1); err != nil {
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
		FROM generate_series(1, $1::bigint) AS i`, []any{violations, now}},
		{"outcomes", `INSERT INTO outcomes (event_id, occurred_at, user_id, ip_address, endpoint, http_method, user_tier,
			status, cost, banned, instance)
		SELECT gen_random_uuid(), $2::timestamptz - random() * interval '7 days',
			CASE WHEN i % 1000 = 0 THEN 'user-42' ELSE 'user-' || (i % 100000) END,
			CASE WHEN i % 500 = 0 THEN '203.0.113.7' ELSE '198.' || (18 + i % 2) || '.' || (i / 7 % 256) || '.' || (i % 256) END::inet,
			'/api/login', 'POST', 'BASIC', CASE WHEN i % 4 = 0 THEN 401 ELSE 200 END, 1, false, 'limiter-' || (i % 3)
		FROM generate_series(1, $1::bigint) AS i`, []any{outcomes, now}},
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
		FROM generate_series(1, 10000) AS i, LATERAL (SELECT $1::timestamptz - random() * interval '7 days' AS t) AS r`, []any{now}},
		{"analyze", `ANALYZE`, nil},
	}
	for _, s := range steps {
		if _, err := store.Pool().Exec(ctx, s.sql, s.args...); err != nil {
			return fmt.Errorf("load %s: %w", s.name, err)
		}
	}
	return nil
}

// BenchmarkPages measures each read of a console page on the loaded
// archive; the target is under 300 ms a page.
func BenchmarkPages(b *testing.B) {
	r, now := loadBenchArchive(b)
	ctx := context.Background()
	ip, _ := ParseSubject("ip", benchIP)
	prefix, _ := ParseSubject("ip", benchPrefix)
	user, _ := ParseSubject("user", benchUser)
	reads := []struct {
		name string
		read func() error
	}{
		{"overview", func() error { _, err := r.Overview(ctx, now); return err }},
		{"rules/denials-24h", func() error { _, err := r.RuleDenials(ctx, now.Add(-24*time.Hour), now); return err }},
		{"audit", func() error { _, err := r.Audit(ctx, now, 100); return err }},
	}
	for _, span := range []time.Duration{time.Hour, 24 * time.Hour, 7 * 24 * time.Hour} {
		for _, s := range []struct {
			name string
			subj Subject
		}{{"address", ip}, {"prefix", prefix}, {"user", user}} {
			reads = append(reads, struct {
				name string
				read func() error
			}{fmt.Sprintf("subject/%s-%s", s.name, span), func() error {
				if _, err := r.Timeline(ctx, s.subj, now.Add(-span), now); err != nil {
					return err
				}
				_, err := r.BansOf(ctx, s.subj, now.Add(-span), now)
				return err
			}})
		}
	}
	for _, rd := range reads {
		b.Run(rd.name, func(b *testing.B) {
			for b.Loop() {
				if err := rd.read(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/page")
		})
	}
}
