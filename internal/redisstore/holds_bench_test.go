//go:build bench

package redisstore

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/testkit/benchenv"
)

// TestBenchHoldCPU (make bench) measures the Redis CPU of a concurrency
// limit's hold beside a fixed-window decision, as TestBenchRedisCPU does
// (a private redis-server, utime + stime ÷ operations, loads taking turns
// within each of BENCH_ROUNDS rounds): a take with a release (the pair a
// request costs: the check takes a hold, its report releases it), against a one-limit fixed window counted as the store sends
// it (INCRBY + PEXPIRE, no script) and decided by its lean script. Each
// take on a client's key releases the hold taken on that key before, so
// keys hold about one hold, as keys of requests in flight do.
func TestBenchHoldCPU(t *testing.T) {
	e := newCPUEnv(t)
	rounds := benchenv.Int(t, "BENCH_ROUNDS", 3)
	store := New(e.client)
	if err := store.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("hold-cpu setup: %d pipelines of %d operations, %d keys, %s per load and round, %d rounds\n",
		e.conns, e.depth, e.keys, e.duration, rounds)
	fixed := decide.Call{Algorithm: decide.FixedWindow, Cost: 1, Limits: []decide.Limit{{Requests: 1000, Per: time.Second}}}
	loads := []cpuLoad{countedLoad(fixed), storeLoad("lean", store, fixed, store.leanest(&fixed)), holdLoad()}
	us := e.compare(t, "hold-cpu", loads, rounds)
	fmt.Println()
	fmt.Println("| per operation | Redis µs | ÷ counted fixed window | ÷ fixed window's lean script |")
	fmt.Println("|---|---|---|---|")
	fmt.Printf("| fixed window, one limit, counted (INCRBY + PEXPIRE) | %s | 1 | %s |\n", spread(us["counted"]), ratios(us, "counted", "lean"))
	fmt.Printf("| fixed window, one limit, lean script (%s) | %s | %s | 1 |\n", store.leanest(&fixed), spread(us["lean"]), ratios(us, "lean", "counted"))
	fmt.Printf("| take and release a hold | %s | %s | %s |\n", spread(us["pair"]), ratios(us, "pair", "counted"), ratios(us, "pair", "lean"))
}

// holdLoad takes a hold on the client's key (5 at most, for a minute) and
// releases the hold taken on that key before, as the store sends them.
func holdLoad() cpuLoad {
	var mu sync.Mutex
	last := map[string]string{}
	rule := decide.Call{Algorithm: decide.Concurrency, Limits: []decide.Limit{{Requests: 5, Per: time.Minute}}}
	return cpuLoad{name: "pair", queue: func(ctx context.Context, pipe redis.Pipeliner, client string) []redis.Cmder {
		c := rule
		c.Keys = decide.Keys{State: "rw:{bench-cc|ip=" + client + "}:cc"}
		c.Cost, c.HoldID = 1, decide.NewHoldID()
		take := holdCall(&c)
		cmds := []redis.Cmder{take.script.EvalSha(ctx, pipe, take.keys, take.args...)}
		mu.Lock()
		prev := last[client]
		last[client] = c.HoldID
		mu.Unlock()
		if prev != "" {
			c.Cost, c.HoldID, c.Release = 0, prev, true
			rel := holdCall(&c)
			cmds = append(cmds, rel.script.EvalSha(ctx, pipe, rel.keys, rel.args...))
		}
		return cmds
	}}
}
