package archivequery

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/testkit/archivebench"
)

// The console's reads at the volumes it must serve, on the archive
// archivebench loads (10 million violations, 1 million outcomes; kept
// between runs with BENCH_ARCHIVE_DB). Every read takes a range on the
// partition column and an index. The whole pages, as a browser gets them,
// are timed by internal/app/console's BenchmarkConsolePages.
//
//	go test ./internal/archivequery/ -run '^$' -bench Pages -benchtime 20x

// BenchmarkPages measures each read of a console page on the loaded
// archive; the target is under 300 ms a page.
func BenchmarkPages(b *testing.B) {
	archive := archivebench.Load(b)
	now := archive.Now
	ctx := context.Background()
	r, err := Open(ctx, archive.URL)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(r.Close)
	ip, _ := ParseSubject("ip", archivebench.IP)
	prefix, _ := ParseSubject("ip", archivebench.Prefix)
	user, _ := ParseSubject("user", archivebench.User)
	reads := []struct {
		name string
		read func() error
	}{
		{"overview", func() error { _, err := r.Overview(ctx, now); return err }},
		{"rules/denials-24h", func() error {
			_, err := r.RuleDenials(ctx, now.Add(-24*time.Hour), now, archivebench.RuleIDs())
			return err
		}},
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
