//go:build bench

package redisabuse

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden/internal/abuse"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/rules"
	"github.com/ratewarden/ratewarden/internal/testkit/abusetest"
	"github.com/ratewarden/ratewarden/internal/testkit/proctest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// TestBenchDistinctRedisCPU measures the Redis CPU per failed outcome of
// the outcome engine's sets on a private redis-server, whose CPU is then
// only this load (utime + stime from /proc ÷ outcomes), with the wall time
// per outcome beside it. Batches of 2000 outcomes, every one a failed
// login (401), go through abuse.OutcomeEngine with these sets, an
// in-memory ledger and publisher, so what Redis does per outcome is what
// the detector has it do:
//   - "new": each outcome from a new source on a new user, the sources
//     named as internal/e2e's bench names them (every add makes new sets);
//   - "attack": 50 sources failing on users drawn from 500, so that sets
//     sit at their cap, evict, cross and are seen again.
//
// BENCH_OUTCOMES (default 60000) outcomes per workload and round,
// BENCH_ROUNDS (default 3) rounds. To compare two versions, build the test
// binary of each and run them in turn, quoting ratios of the same round.
// BENCH_COMMANDSTATS=1 also prints, per command Redis ran, its calls and µs
// per outcome (a script's commands are counted inside its own time).
func TestBenchDistinctRedisCPU(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: redistest.StartServer(t)})
	t.Cleanup(func() { _ = client.Close() })
	pid := redistest.Info(client, "server", "process_id")
	n := benchEnvInt(t, "BENCH_OUTCOMES", 60_000)
	rounds := benchEnvInt(t, "BENCH_ROUNDS", 3)
	t0 := time.Now().Add(-time.Hour).UTC().Truncate(time.Millisecond)
	workloads := []struct {
		name    string
		outcome func(i int) (ip, user string)
	}{
		{"new", func(i int) (string, string) {
			return fmt.Sprintf("10.%d.%d.%d", i%7, (i/7)%256, i%251), fmt.Sprintf("user-%d", i)
		}},
		{"attack", func(i int) (string, string) {
			return fmt.Sprintf("198.51.100.%d", i%50), fmt.Sprintf("user-%d", (i*7919)%500)
		}},
	}
	for round := range rounds {
		for _, w := range workloads {
			ctx := context.Background()
			if err := client.FlushAll(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			det := rules.Detection{
				CredentialStuffing: &rules.CredentialStuffingPolicy{DistinctUsers: 2,
					OutcomeScenario: rules.OutcomeScenario{Within: rules.Duration(10 * time.Minute), Duration: rules.Duration(time.Hour)}},
				AccountAttack: &rules.AccountAttackPolicy{DistinctSources: 10,
					OutcomeScenario: rules.OutcomeScenario{Within: rules.Duration(10 * time.Minute), Duration: rules.Duration(time.Hour)}},
			}
			now := t0.Add(time.Hour)
			eng, err := abuse.NewOutcomeEngine(abuse.OutcomeConfig{Detection: det, Now: func() time.Time { return now }},
				NewDistinct(client, "b:"), abusetest.NewMemoryLedger(), new(abusetest.Published))
			if err != nil {
				t.Fatal(err)
			}
			const batch = 2000
			in := make([]abuse.OutcomeInput, 0, batch)
			var took time.Duration
			if err := client.ConfigResetStat(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			cpu := -proctest.CPU(t, pid)
			for i := range n {
				ip, user := w.outcome(i)
				in = append(in, abuse.OutcomeInput{Topic: "outcomes", Outcome: event.Outcome{
					EventID: fmt.Sprintf("bench-%d", i), TS: t0.Add(time.Duration(i) * time.Millisecond), Instance: "bench",
					IP: ip, UserID: user, Endpoint: "/api/login", Method: "POST", Status: 401, Cost: 1}})
				if len(in) == batch || i == n-1 {
					start := time.Now()
					if _, _, err := eng.Process(ctx, in); err != nil {
						t.Fatal(err)
					}
					took += time.Since(start)
					in = in[:0]
				}
			}
			cpu += proctest.CPU(t, pid)
			fmt.Printf("distinct-cpu round %d %-6s: redis %.1f µs/outcome, wall %.1f µs/outcome (%.0f outcomes/s)\n",
				round, w.name, float64(cpu.Microseconds())/float64(n), float64(took.Microseconds())/float64(n),
				float64(n)/took.Seconds())
			if os.Getenv("BENCH_COMMANDSTATS") != "" {
				printCommandStats(t, client, n)
			}
		}
	}
}

// printCommandStats prints, per command Redis ran (those of scripts
// included), its calls and µs per outcome.
func printCommandStats(t *testing.T, client *redis.Client, n int) {
	t.Helper()
	info, err := client.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(info) {
		name, stats, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "cmdstat_"), ":")
		if !ok || strings.HasPrefix(name, "#") {
			continue
		}
		var calls, usec int64
		for kv := range strings.SplitSeq(stats, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "calls":
				calls, _ = strconv.ParseInt(v, 10, 64)
			case "usec":
				usec, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		fmt.Printf("  %-18s %6.2f calls/outcome %6.2f µs/outcome\n", name, float64(calls)/float64(n), float64(usec)/float64(n))
	}
}

func benchEnvInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}
