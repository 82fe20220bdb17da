package pgstore

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ratewarden/ratewarden/internal/archiver"
)

// partitions lists the partitions of table by name.
func partitions(t *testing.T, s *Store, table string) []string {
	t.Helper()
	rows, err := s.pool.Query(context.Background(), `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = $1::regclass ORDER BY 1`, table)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// partitionOf is the partition a violation row landed in.
func partitionOf(t *testing.T, s *Store, v archiver.Violation) string {
	t.Helper()
	return queryString(t, s, "SELECT tableoid::regclass::text FROM rate_limit_violations WHERE event_id = $1", v.EventID)
}

func TestPartitionsAcrossDayBoundary(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	beforeMidnight := time.Date(2030, 3, 31, 23, 59, 0, 0, time.UTC)
	afterMidnight := beforeMidnight.Add(2 * time.Minute) // 2030-04-01 00:01

	if err := s.EnsurePartitions(ctx, beforeMidnight, 1); err != nil {
		t.Fatal(err)
	}
	want := []string{"rate_limit_violations_20300330", "rate_limit_violations_20300331",
		"rate_limit_violations_20300401", "rate_limit_violations_default"}
	if got := partitions(t, s, "rate_limit_violations"); !slices.Equal(got, want) {
		t.Errorf("at 23:59: partitions %v, want %v", got, want)
	}
	// A time in another zone names the same UTC day.
	if err := s.EnsurePartitions(ctx, beforeMidnight.In(time.FixedZone("UTC+10", 10*3600)), 1); err != nil {
		t.Fatal(err)
	}
	if got := partitions(t, s, "rate_limit_violations"); !slices.Equal(got, want) {
		t.Errorf("same instant in UTC+10: partitions %v, want %v", got, want)
	}
	for range 2 { // idempotent
		if err := s.EnsurePartitions(ctx, afterMidnight, 1); err != nil {
			t.Fatal(err)
		}
	}
	want = slices.Insert(want, 3, "rate_limit_violations_20300402")
	if got := partitions(t, s, "rate_limit_violations"); !slices.Equal(got, want) {
		t.Errorf("at 00:01: partitions %v, want %v", got, want)
	}

	late, early := violation(1, beforeMidnight.Add(59*time.Second+999*time.Millisecond)), violation(2, afterMidnight.Add(-time.Minute))
	ancient := violation(3, beforeMidnight.AddDate(-10, 0, 0))
	future := violation(4, afterMidnight.AddDate(0, 0, 5)) // beyond the partitions made ahead
	if _, err := s.Write(ctx, archiver.Batch{Violations: []archiver.Violation{late, early, ancient, future}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		v    archiver.Violation
		want string
	}{
		{late, "rate_limit_violations_20300331"},
		{early, "rate_limit_violations_20300401"},
		{ancient, "rate_limit_violations_default"},
		{future, "rate_limit_violations_default"},
	} {
		if got := partitionOf(t, s, tc.v); got != tc.want {
			t.Errorf("row at %s landed in %s, want %s", tc.v.OccurredAt, got, tc.want)
		}
	}

	// Time moves on: the future row's day gets its partition, and the row
	// moves out of the DEFAULT partition into it.
	if err := s.EnsurePartitions(ctx, afterMidnight.AddDate(0, 0, 4), 1); err != nil {
		t.Fatal(err)
	}
	if got := partitionOf(t, s, future); got != "rate_limit_violations_20300406" {
		t.Errorf("future row in %s after its partition was created, want rate_limit_violations_20300406", got)
	}

	// An attached partition gets the parent's indexes like a created one.
	for _, p := range []string{"rate_limit_violations_20300401", "rate_limit_violations_20300406"} {
		if n := queryInt(t, s, "SELECT count(*) FROM pg_indexes WHERE tablename = $1", p); n != 5 {
			t.Errorf("%s has %d indexes, want 5 (primary key and 4)", p, n)
		}
	}

	// Retention: on 2030-04-06 00:01 with 5 days, days ending at or before
	// 2030-04-01 00:01 go: 03-30 and 03-31. 04-01 ends later and stays.
	dropped, err := s.DropPartitions(ctx, afterMidnight.AddDate(0, 0, 5), 5)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"rate_limit_violations_20300330", "rate_limit_violations_20300331",
		"outcomes_20300330", "outcomes_20300331"}; !slices.Equal(dropped, want) {
		t.Errorf("dropped %v, want %v", dropped, want)
	}
	// (04-03 was never made: time jumped from 04-01 to 04-05.)
	want = []string{"rate_limit_violations_20300401", "rate_limit_violations_20300402",
		"rate_limit_violations_20300404", "rate_limit_violations_20300405", "rate_limit_violations_20300406",
		"rate_limit_violations_default"}
	if got := partitions(t, s, "rate_limit_violations"); !slices.Equal(got, want) {
		t.Errorf("after retention: partitions %v, want %v", got, want)
	}
	var ids []string
	rows, err := s.pool.Query(ctx, "SELECT event_id::text FROM rate_limit_violations ORDER BY occurred_at")
	if err != nil {
		t.Fatal(err)
	}
	if ids, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	// The late row went with its partition, the ancient one out of DEFAULT.
	if want := []string{early.EventID, future.EventID}; !slices.Equal(ids, want) {
		t.Errorf("rows left %v, want %v", ids, want)
	}

	if dropped, err := s.DropPartitions(ctx, afterMidnight.AddDate(0, 0, 5), 5); err != nil || len(dropped) != 0 {
		t.Errorf("second DropPartitions = %v, %v; want nothing dropped", dropped, err)
	}
	if _, err := s.DropPartitions(ctx, afterMidnight, 0); err == nil {
		t.Error("DropPartitions with 0 days of retention succeeded")
	}
}

func TestEnsurePartitionsConcurrently(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	now := time.Date(2031, 1, 1, 12, 0, 0, 0, time.UTC)
	errs := make(chan error, 4)
	for range cap(errs) {
		go func() { errs <- s.EnsurePartitions(ctx, now, 3) }()
	}
	for range cap(errs) {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	for _, table := range []string{"rate_limit_violations", "outcomes"} {
		if got := len(partitions(t, s, table)); got != 6 { // 5 days and DEFAULT
			t.Errorf("%s: %d partitions, want 6", table, got)
		}
	}
}

// TestPruneDeadLetters: dead letters older than the retention, by
// Postgres's clock, are deleted; newer ones stay.
func TestPruneDeadLetters(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	for i, age := range []string{"31 days", "29 days", "1 minute"} {
		if _, err := s.pool.Exec(ctx, `INSERT INTO dead_letters (topic, "partition", "offset", raw, error, received_at)
			VALUES ('t', 0, $1, '\x00', 'test', now() - $2::interval)`, i, age); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := s.PruneDeadLetters(ctx, 30); err != nil || n != 1 {
		t.Fatalf("PruneDeadLetters = %d, %v; want 1 deleted", n, err)
	}
	if got := queryString(t, s, "SELECT string_agg(\"offset\"::text, ',' ORDER BY \"offset\") FROM dead_letters"); got != "1,2" {
		t.Errorf("dead letters left at offsets %s, want 1,2", got)
	}
	if _, err := s.PruneDeadLetters(ctx, 0); err == nil {
		t.Error("PruneDeadLetters with 0 days of retention succeeded")
	}
}
