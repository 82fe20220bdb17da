package archivequery

import (
	"context"
	"maps"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/archiver"
	"github.com/ratewarden/ratewarden/internal/event"
)

// RuleDenials, whole hours from the hourly counts and part-hours from the
// violations, gives what counting every violation of the range gives:
// random ranges, ranges within one hour, on hour boundaries, empty and
// reversed ones, in any time zone.
func TestRuleDenialsEqualsCountingEveryViolation(t *testing.T) {
	now := time.Now().UTC()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	span := 30 * time.Hour
	vs := make([]archiver.Violation, 3000)
	for i := range vs {
		at := now.Add(time.Hour - time.Duration(rng.Int64N(int64(span))))
		if i%10 == 0 { // on an hour's first instant
			at = at.Truncate(time.Hour)
		}
		vs[i] = violation(at, "203.0.113.9", "", []string{"login", "search", "books"}[rng.IntN(3)], event.ReasonRateLimited)
		vs[i].Shadow = rng.IntN(4) == 0
	}
	r, store := archive(t, archiver.Batch{Violations: vs})
	ctx := context.Background()

	counted := func(from, to time.Time) map[string]int64 {
		t.Helper()
		rows, err := store.Pool().Query(ctx, `SELECT rule_id, count(*) FROM rate_limit_violations
			WHERE occurred_at >= $1 AND occurred_at < $2 AND NOT shadow GROUP BY rule_id`, from, to)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int64{}
		for rows.Next() {
			var rule string
			var n int64
			if err := rows.Scan(&rule, &n); err != nil {
				t.Fatal(err)
			}
			out[rule] = n
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	hour := now.Truncate(time.Hour)
	ranges := [][2]time.Time{
		{now.Add(-24 * time.Hour), now},                                                        // the rules page
		{hour.Add(-5 * time.Hour), hour},                                                       // whole hours only
		{hour.Add(-5 * time.Hour), hour.Add(-5 * time.Hour)},                                   // empty
		{hour.Add(-3*time.Hour + time.Minute), hour.Add(-3 * time.Hour).Add(50 * time.Minute)}, // within one hour
		{hour.Add(-3*time.Hour + time.Minute), hour.Add(-2 * time.Hour).Add(time.Minute)},      // across one boundary, no whole hour
		{now, now.Add(-time.Hour)},                                                             // reversed
		{now.Add(-40 * time.Hour), now.Add(5 * time.Hour)},                                     // beyond every row
		{hour.Add(-10 * time.Hour).Add(-time.Microsecond), hour.Add(-2 * time.Hour).Add(time.Microsecond)},
	}
	for range 40 {
		from := now.Add(2*time.Hour - time.Duration(rng.Int64N(int64(span+4*time.Hour))))
		ranges = append(ranges, [2]time.Time{from, from.Add(time.Duration(rng.Int64N(int64(12 * time.Hour))))})
	}
	nonEmpty := 0
	for _, rg := range ranges {
		from, to := rg[0], rg[1]
		if rng.IntN(2) == 0 { // the zone of the caller's clock
			from, to = from.In(time.FixedZone("+0530", 5*3600+1800)), to.In(time.FixedZone("+0530", 5*3600+1800))
		}
		ids := []string{"login", "search", "books"}
		want := counted(from, to)
		if rng.IntN(3) == 0 { // a rule left out is not counted
			ids = ids[1:]
			delete(want, "login")
		}
		got, err := r.RuleDenials(ctx, from, to, ids)
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(got, want) {
			t.Errorf("[%v, %v): %v, counting every violation %v", from, to, got, want)
		}
		if len(want) > 0 {
			nonEmpty++
		}
	}
	if nonEmpty < len(ranges)/2 {
		t.Errorf("only %d of %d ranges hold violations", nonEmpty, len(ranges))
	}
}

func TestWholeHours(t *testing.T) {
	h := time.Date(2030, 1, 2, 10, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name                  string
		from, to, first, last time.Time
	}{
		{"aligned", h, h.Add(3 * time.Hour), h, h.Add(3 * time.Hour)},
		{"part-hours at both ends", h.Add(time.Minute), h.Add(3*time.Hour + time.Minute), h.Add(time.Hour), h.Add(3 * time.Hour)},
		{"exactly one whole hour", h.Add(-time.Nanosecond), h.Add(time.Hour + time.Nanosecond), h, h.Add(time.Hour)},
		{"no whole hour", h.Add(time.Minute), h.Add(time.Hour + time.Minute), h.Add(time.Hour + time.Minute), h.Add(time.Hour + time.Minute)},
		{"empty", h, h, h, h},
		{"reversed", h.Add(time.Hour), h, h, h},
		{"a zone half an hour off", h.In(time.FixedZone("+0530", 5*3600+1800)), h.Add(2 * time.Hour), h, h.Add(2 * time.Hour)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			first, last := wholeHours(tt.from, tt.to)
			if !first.Equal(tt.first) || !last.Equal(tt.last) {
				t.Errorf("wholeHours(%v, %v) = %v, %v; want %v, %v", tt.from, tt.to, first, last, tt.first, tt.last)
			}
		})
	}
}
