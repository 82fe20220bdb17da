package pgstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/archiver"
)

// ruleHourlyMismatches returns the rows where violations_by_rule_hourly
// and a count of every violation by UTC hour, rule and shadow disagree
// (an hour missing from either side included).
func ruleHourlyMismatches(t *testing.T, s *Store) []string {
	t.Helper()
	rows, err := s.pool.Query(context.Background(), `
		WITH counted AS (
			SELECT date_trunc('hour', occurred_at, 'UTC') AS hour, rule_id, shadow, count(*) AS n
			FROM rate_limit_violations GROUP BY 1, 2, 3)
		SELECT to_char(coalesce(c.hour, k.hour) AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS'),
			coalesce(c.rule_id, k.rule_id), coalesce(c.shadow, k.shadow), coalesce(c.n, 0), coalesce(k.n, 0)
		FROM counted c FULL JOIN violations_by_rule_hourly k USING (hour, rule_id, shadow)
		WHERE c.n IS DISTINCT FROM k.n
		ORDER BY 1, 2, 3`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var hour, rule string
		var shadow bool
		var counted, kept int64
		if err := rows.Scan(&hour, &rule, &shadow, &counted, &kept); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%s %s shadow=%v: %d violations, %d kept", hour, rule, shadow, counted, kept))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func assertRuleHourlyCounts(t *testing.T, s *Store) {
	t.Helper()
	for _, m := range ruleHourlyMismatches(t, s) {
		t.Error(m)
	}
	if n := queryInt(t, s, "SELECT count(*) FROM violations_by_rule_hourly"); n == 0 {
		t.Error("violations_by_rule_hourly is empty")
	}
}

// randomViolations returns n violations numbered from first, at instants
// within span before now (some of them ahead of it), of four rules, some
// shadow.
func randomViolations(rng *rand.Rand, first, n int, now time.Time, span time.Duration) []archiver.Violation {
	vs := make([]archiver.Violation, n)
	for i := range vs {
		at := now.Add(-time.Duration(rng.Int64N(int64(span)))).Add(time.Hour)
		vs[i] = violation(first+i, at)
		vs[i].RuleID = fmt.Sprintf("rule-%d", rng.IntN(4))
		vs[i].Shadow = rng.IntN(5) == 0
	}
	return vs
}

// The hourly counts count each violation once: batches written again as
// the archiver does after a redelivery, batches mixing rows already
// stored with new ones, and rows that land in the DEFAULT partition (days
// without a partition of their own). The writer's session time zone, half
// an hour off UTC, does not move the hours.
func TestRuleHourlyCountsEachViolationOnce(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	now := time.Now().UTC()
	if err := s.EnsurePartitions(ctx, now, 1); err != nil {
		t.Fatal(err)
	}
	w := openStore(t, s.pool.Config().ConnString()+"&timezone=Asia/Kolkata")
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))

	first := randomViolations(rng, 0, 500, now, 4*24*time.Hour)
	second := append(randomViolations(rng, 500, 300, now, 4*24*time.Hour), first[100:250]...)
	for _, b := range [][]archiver.Violation{first, first, second, first[:50], second} {
		if _, err := w.Write(ctx, archiver.Batch{Violations: b}); err != nil {
			t.Fatal(err)
		}
	}
	if n := queryInt(t, s, "SELECT count(*) FROM rate_limit_violations"); n != 800 {
		t.Fatalf("%d violations stored, want 800", n)
	}
	if n := queryInt(t, s, "SELECT coalesce(sum(n), 0) FROM violations_by_rule_hourly"); n != 800 {
		t.Errorf("the hourly counts sum to %d, want 800", n)
	}
	if n := queryInt(t, s, "SELECT count(*) FROM violations_by_rule_hourly WHERE hour <> date_trunc('hour', hour, 'UTC')"); n != 0 {
		t.Errorf("%d hours do not start on a UTC hour", n)
	}
	assertRuleHourlyCounts(t, s)
}

// Two archivers writing at once, the same events among their batches (a
// rebalance hands a partition over), count each stored violation once, and
// neither fails (no deadlock on the hours both update).
func TestRuleHourlyCountsConcurrentWriters(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	now := time.Now().UTC()
	if err := s.EnsurePartitions(ctx, now, 1); err != nil {
		t.Fatal(err)
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	// Each round: a batch of each archiver's own and a batch both write.
	const rounds, size = 20, 100
	type round struct{ own [2][]archiver.Violation }
	rs := make([]round, rounds)
	for i := range rs {
		shared := randomViolations(rng, i*3*size, size, now, 6*time.Hour)
		for w := range 2 {
			rs[i].own[w] = append(randomViolations(rng, (i*3+1+w)*size, size, now, 6*time.Hour), shared...)
		}
	}
	writers := [2]*Store{s, openStore(t, s.pool.Config().ConnString())}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for w, st := range writers {
		wg.Go(func() {
			for _, r := range rs {
				if _, err := st.Write(ctx, archiver.Batch{Violations: r.own[w]}); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	for w, err := range errs {
		if err != nil {
			t.Fatalf("writer %d: %v", w, err)
		}
	}
	if n := queryInt(t, s, "SELECT coalesce(sum(n), 0) FROM violations_by_rule_hourly"); n != rounds*3*size {
		t.Errorf("the hourly counts sum to %d, want %d", n, rounds*3*size)
	}
	assertRuleHourlyCounts(t, s)
}

// Retention deletes the hours of the days whose partitions it drops and
// keeps the others, so the counts still match the violations kept.
func TestRuleHourlyRetention(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	now := time.Now().UTC()
	for d := 5; d >= 0; d-- {
		if err := s.EnsurePartitions(ctx, now.AddDate(0, 0, -d), 1); err != nil {
			t.Fatal(err)
		}
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))
	if _, err := s.Write(ctx, archiver.Batch{Violations: randomViolations(rng, 0, 1000, now, 6*24*time.Hour)}); err != nil {
		t.Fatal(err)
	}
	const retention = 3
	firstKept := now.Add(-retention * day).Truncate(day)
	if n := queryInt(t, s, "SELECT count(*) FROM violations_by_rule_hourly WHERE hour < $1", firstKept); n == 0 {
		t.Fatal("no hour before the retention to delete: the test cannot fail")
	}
	if _, err := s.DropPartitions(ctx, now, retention); err != nil {
		t.Fatal(err)
	}
	if n := queryInt(t, s, "SELECT count(*) FROM violations_by_rule_hourly WHERE hour < $1", firstKept); n != 0 {
		t.Errorf("%d hours before %v kept", n, firstKept)
	}
	assertRuleHourlyCounts(t, s)
}

// Migration 0010 counts the violations archived before it, and the
// reader role may read the counts.
func TestRuleHourlyMigrationCountsTheArchive(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	now := time.Now().UTC()
	if err := s.EnsurePartitions(ctx, now, 1); err != nil {
		t.Fatal(err)
	}
	// The archive as 0009 left it: undo 0010.
	if _, err := s.pool.Exec(ctx, `DROP TABLE violations_by_rule_hourly;
		DROP FUNCTION count_violations_by_rule_hourly() CASCADE;
		DELETE FROM schema_migrations WHERE version = 10`); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))
	if _, err := s.Write(ctx, archiver.Batch{Violations: randomViolations(rng, 0, 500, now, 3*24*time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if n := queryInt(t, s, "SELECT coalesce(sum(n), 0) FROM violations_by_rule_hourly"); n != 500 {
		t.Errorf("the hourly counts sum to %d, want 500", n)
	}
	// Written after the migration: counted by the trigger.
	if _, err := s.Write(ctx, archiver.Batch{Violations: randomViolations(rng, 500, 100, now, 3*24*time.Hour)}); err != nil {
		t.Fatal(err)
	}
	assertRuleHourlyCounts(t, s)
	if n := queryInt(t, s, "SELECT count(*) FROM pg_roles WHERE rolname = 'ratewarden_reader' AND has_table_privilege(oid, 'violations_by_rule_hourly', 'SELECT')"); n != 1 {
		t.Error("ratewarden_reader cannot read violations_by_rule_hourly")
	}
}
