package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/ratewarden/ratewarden/internal/adminclient"
	limiterapp "github.com/ratewarden/ratewarden/internal/app/limiter"
	"github.com/ratewarden/ratewarden/internal/archivequery"
	"github.com/ratewarden/ratewarden/internal/config"
	"github.com/ratewarden/ratewarden/internal/testkit/archivebench"
	"github.com/ratewarden/ratewarden/internal/testkit/benchenv"
	"github.com/ratewarden/ratewarden/internal/testkit/kafkatest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// BenchmarkConsolePages times each page of the console as a browser gets
// it: a GET through the console's own listener, by a logged-in user, the
// page rendered from its templates with its SVG charts, on the archive
// archivebench loads (10 million violations, 1 million outcomes; kept
// between runs with BENCH_ARCHIVE_DB=name) and a real limiter's admin API
// (on the local Redis, with BENCH_LIVE_BANS bans in force, 200, made
// through that API). The console's clock is set back to the instant the
// archive was loaded, so a kept archive is read as when it was fresh.
//
// Each page reports its p50, p95 and max over the runs (-benchtime Nx),
// and read-ms, the p50 of the archive reads the page makes, timed on their
// own with the same ranges: the rest of a page's time is the admin API
// (its bans and rules cached for a second, as a page finds them), the
// rendering and HTTP. The target is under 300 ms a page.
//
//	BENCH_ARCHIVE_DB=ratewarden_bench go test ./internal/app/console/ -run '^$' -bench ConsolePages -benchtime 20x -timeout 60m
func BenchmarkConsolePages(b *testing.B) {
	archive := archivebench.Load(b)
	shift := time.Since(archive.Now)
	clock := func() time.Time { return time.Now().Add(-shift) }
	limiter := startBenchLimiter(b, archive.URL)
	bans := benchenv.Int(b, "BENCH_LIVE_BANS", 200)
	banLive(b, limiter, bans)
	base := startBenchConsole(b, archive.URL, limiter, clock)
	browser := newBrowser(b, base)
	browser.login("vic", "vic-password")

	reader, err := archivequery.Open(context.Background(), archive.URL)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(reader.Close)
	ctx := context.Background()
	noRead := func(time.Time) error { return nil }
	pages := []struct {
		name, path string
		// read makes the page's archive reads as of now.
		read func(now time.Time) error
	}{
		{"overview", "/", func(now time.Time) error { _, err := reader.Overview(ctx, now); return err }},
		{"bans", "/bans", noRead},
		{"bans/scope-user", "/bans?scope=user", noRead},
		{"bans/scenario-scan", "/bans?scenario=scan", noRead},
		{"bans/subject-198.18", "/bans?scope=ip&subject=198.18.1", noRead},
		{"rules", "/rules", func(now time.Time) error {
			_, err := reader.RuleDenials(ctx, now.Add(-24*time.Hour), now, archivebench.RuleIDs())
			return err
		}},
		{"audit", "/audit", func(now time.Time) error {
			_, err := reader.Audit(ctx, now.Add(time.Minute), 100)
			return err
		}},
	}
	for _, subject := range []struct{ name, scope, value string }{
		{"address", "ip", archivebench.IP}, {"prefix", "ip", archivebench.Prefix}, {"user", "user", archivebench.User},
	} {
		subj, err := archivequery.ParseSubject(subject.scope, subject.value)
		if err != nil {
			b.Fatal(err)
		}
		for _, span := range []string{"1h", "6h", "24h", "168h"} {
			d, _ := time.ParseDuration(span)
			pages = append(pages, struct {
				name, path string
				read       func(time.Time) error
			}{
				fmt.Sprintf("subject/%s-%s", subject.name, span),
				"/subject?" + (url.Values{"scope": {subject.scope}, "value": {subject.value}, "range": {span}}).Encode(),
				func(now time.Time) error {
					to := now.UTC().Truncate(time.Second)
					if _, err := reader.Timeline(ctx, subj, to.Add(-d), to); err != nil {
						return err
					}
					_, err := reader.BansOf(ctx, subj, to.Add(-d), to)
					return err
				},
			})
		}
	}

	var summary strings.Builder
	fmt.Fprintf(&summary, "\n%-24s %5s %8s %8s %8s %8s %6s\n", "page", "runs", "p50 ms", "p95 ms", "max ms", "read ms", "read%")
	for _, pg := range pages {
		b.Run(pg.name, func(b *testing.B) {
			var took, reads []time.Duration
			for b.Loop() {
				start := time.Now()
				p := browser.get(pg.path)
				took = append(took, time.Since(start))
				if p.status != http.StatusOK || strings.Contains(p.body, "unavailable") || strings.Contains(p.body, "did not answer") {
					b.Fatalf("GET %s: %d\n%s", pg.path, p.status, p.body)
				}
				b.StopTimer()
				start = time.Now()
				if err := pg.read(clock()); err != nil {
					b.Fatal(err)
				}
				reads = append(reads, time.Since(start))
				time.Sleep(pace)
				b.StartTimer()
			}
			p50, p95, most := percentile(took, 50), percentile(took, 95), percentile(took, 100)
			read := percentile(reads, 50)
			b.ReportMetric(ms(p50), "p50-ms")
			b.ReportMetric(ms(p95), "p95-ms")
			b.ReportMetric(ms(most), "max-ms")
			b.ReportMetric(ms(read), "read-ms")
			b.ReportMetric(0, "ns/op")
			fmt.Fprintf(&summary, "%-24s %5d %8.1f %8.1f %8.1f %8.1f %5.0f%%\n", pg.name, len(took), ms(p50), ms(p95), ms(most), ms(read), 100*min(ms(read)/ms(p50), 1))
		})
	}
	b.Logf("%d violations, %d outcomes, %d bans in force:%s", archive.Violations, archive.Outcomes, bans, summary.String())
}

// pace spaces the GETs: the admin API admits 10 calls a second from the
// console, and the overview asks it for the decision mode every time;
// faster GETs would be refused (429) and the page timed without the call.
// A person's clicks are further apart still.
const pace = 150 * time.Millisecond

// percentile returns the p-th percentile of ds (nearest rank).
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(ds))
	i := (p*len(s)+99)/100 - 1
	return s[max(i, 0)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// benchRules are twenty rules named as the archive's violations are
// (rule-0 to rule-19), so the rules page counts denials for each.
func benchRules() string {
	var b strings.Builder
	b.WriteString("rules:\n")
	for i := range 20 {
		fmt.Fprintf(&b, "  - id: rule-%d\n    match: {endpoints: [\"/api/item/%d/**\"]}\n    key: [ip]\n    algorithm: fixed_window\n    limits: [{requests: 100, per: 1m}]\n", i, i)
	}
	b.WriteString("detection:\n  ban: [{violations: 5, within: 1h, duration: 1h}]\n")
	return b.String()
}

// startBenchLimiter starts a limiter on the local Redis and an embedded
// broker, its dynamic rules in db, and returns its base URL.
func startBenchLimiter(b *testing.B, db string) string {
	b.Helper()
	broker := kafkatest.StartBroker(b, decisionsTopic, bansTopic, outcomesTopic)
	dir := b.TempDir()
	rules := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rules, []byte(benchRules()), 0o600); err != nil {
		b.Fatal(err)
	}
	env := map[string]string{
		"KAFKA_BROKERS": broker.Addr(), "REDIS_URL": redistest.RequiredURL(b),
		"REDIS_KEY_PREFIX": redistest.Prefix(b, redistest.Client(b)),
		"DECISIONS_TOPIC":  decisionsTopic, "BANS_TOPIC": bansTopic, "OUTCOMES_TOPIC": outcomesTopic,
		"LISTEN_ADDR": "127.0.0.1:0", "RULES_FILE": rules, "DATABASE_URL": db,
		"GRPC_LISTEN_ADDR": "off", "ADMIN_TOKEN": adminToken, "INSTANCE_ID": "limiter-" + uuid.NewString()[:8],
	}
	limiter := must(limiterapp.New(must(config.LoadLimiter(func(k string) string { return env[k] }))(b),
		limiterapp.Deps{Log: zap.NewNop(), Registry: prometheus.NewRegistry()}))(b)
	run(b, "limiter", limiter.Run, func() string { return limiter.Addrs().Decisions })
	return "http://" + limiter.Addrs().Decisions
}

// banLive puts n bans in force through the limiter's admin API, addresses
// and users, of the scenarios the bans page filters on; the API admits 10
// calls a second, so a refused call waits and tries again.
func banLive(b *testing.B, limiter string, n int) {
	b.Helper()
	admin := adminclient.New(limiter, adminToken, 5*time.Second)
	reasons := []string{"scan", "violations_1h", "manual"}
	for i := range n {
		scope, subject := "ip", fmt.Sprintf("198.18.%d.%d", i/256%256, i%256)
		if i%4 == 0 {
			scope, subject = "user", fmt.Sprintf("user-%d", i)
		}
		for attempt := 0; ; attempt++ {
			_, _, err := admin.Ban(context.Background(), scope, subject, time.Hour, reasons[i%len(reasons)], "bench")
			if err == nil {
				break
			}
			if attempt == 50 {
				b.Fatalf("ban %s %s: %v", scope, subject, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	// The admin API's burst back (20 calls at 10 a second), for the
	// console's pages.
	time.Sleep(2 * time.Second)
}

// startBenchConsole starts the console on db (as the archiver's read-only
// role, as deployed) and the limiter's admin API, on clock, and returns
// its base URL.
func startBenchConsole(b *testing.B, db, limiter string, clock func() time.Time) string {
	b.Helper()
	dir := b.TempDir()
	files := map[string]string{"token": adminToken + "\n", "users": usersFile(b)}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	env := map[string]string{
		"LISTEN_ADDR": "127.0.0.1:0", "DATABASE_URL": readerURL(b, db),
		"CONSOLE_ADMIN_TOKEN_FILE": filepath.Join(dir, "token"), "CONSOLE_USERS_FILE": filepath.Join(dir, "users"),
	}
	cfg := must(config.LoadConsole(func(k string) string { return env[k] }))(b)
	cfg.AdminURL = limiter
	c := must(New(context.Background(), cfg, Deps{Log: zaptest.NewLogger(b, zaptest.Level(zap.WarnLevel)),
		Registry: prometheus.NewRegistry(), Now: clock}))(b)
	run(b, "console", c.Run, c.Addr)
	return "http://localhost:" + port(b, c.Addr())
}
