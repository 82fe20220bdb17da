package pgstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/archiver"
)

// BenchmarkWrite measures Write with violation batches of the archiver's
// sizes, in rows per second, against the local Postgres. The rows are of
// 20 rules over the last two hours, so a batch adds to up to 40 of the
// hourly counts (violations_by_rule_hourly), as a busy archive's would.
func BenchmarkWrite(b *testing.B) {
	for _, size := range []int{100, 1000, 5000} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			s := benchStore(b)
			now := time.Now().UTC()
			if err := s.EnsurePartitions(context.Background(), now, 1); err != nil {
				b.Fatal(err)
			}
			next := 0
			batch := archiver.Batch{Violations: make([]archiver.Violation, size)}
			b.ResetTimer()
			for b.Loop() {
				for i := range batch.Violations {
					batch.Violations[i] = violation(next, now.Add(-time.Duration(next%7200)*time.Second))
					batch.Violations[i].RuleID = fmt.Sprintf("rule-%d", next%20)
					next++
				}
				if _, err := s.Write(context.Background(), batch); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(next)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}
