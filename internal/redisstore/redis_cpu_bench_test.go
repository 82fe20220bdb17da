//go:build bench

package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/testkit/benchenv"

	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/testkit/proctest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
	"github.com/ratewarden/ratewarden/lua"
)

// TestBenchRedisCPU (make bench) measures the Redis CPU per decision of
// the scripts on a private redis-server, whose CPU is then only this load
// (utime + stime from /proc ÷ decisions): per algorithm, for a rule of one
// limit and for one of two, without penalty or escalations, the full script
// against the leanest one; and for the fixed window of one limit, the
// counted call the store sends (no script), the INCRBY + PEXPIRE pipeline
// that envoyproxy/ratelimit sends per decision, and a script that only
// returns the reply (the floor of any script with that reply). The counted
// call and the pipeline each name a client's key as their own service does,
// so that Redis hashes and stores keys of the lengths it would. Every load
// runs at the same concurrency and
// pipelining (BENCH_CONNS pipelines of BENCH_PIPELINE decisions of
// BENCH_KEYS random clients, limits of 1000 per second and more, so that
// decisions are admitted) in BENCH_ROUNDS rounds of BENCH_DURATION each,
// the loads taking turns within a round (A B C A B C) so that the
// machine's drift hits them alike. It prints µs per decision per load and
// round, then Markdown tables: µs per decision as median (min – max) over
// the rounds, ratios as the median (min – max) of the per-round ratios.
func TestBenchRedisCPU(t *testing.T) {
	e := newCPUEnv(t)
	rounds := benchenv.Int(t, "BENCH_ROUNDS", 3)
	store := New(e.client)
	if err := store.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("redis-cpu setup: %d pipelines of %d decisions, %d keys, %s per load and round, %d rounds\n",
		e.conns, e.depth, e.keys, e.duration, rounds)
	second := decide.Limit{Requests: 100_000, Rate: 100_000, Burst: 100_000, Per: time.Minute}
	var rows []string
	var ref map[string][]float64
	for _, alg := range strings.Fields(benchenv.String("BENCH_ALGORITHMS", "fixed_window sliding_window sliding_window_counter token_bucket")) {
		one := decide.Call{Algorithm: decide.Algorithm(alg), Cost: 1,
			Limits: []decide.Limit{{Requests: 1000, Rate: 1000, Burst: 1000, Per: time.Second}}}
		two := one
		two.Limits = append(slices.Clip(one.Limits), second)
		leanOne, leanTwo := store.leanest(&one), store.leanest(&two)
		loads := []cpuLoad{
			storeLoad("full", store, one, lua.Full), storeLoad("lean", store, one, leanOne),
			storeLoad("full2", store, two, lua.Full), storeLoad("lean2", store, two, leanTwo),
		}
		fixed := one.Algorithm == decide.FixedWindow
		if fixed {
			loads = append(loads, countedLoad(one), cpuLoad{name: "incr", queue: incrExpire}, replyOnly(t, e.client))
		}
		us := e.compare(t, "redis-cpu "+alg, loads, rounds)
		rows = append(rows, fmt.Sprintf("| %s | %s | %s (%s) | %s | %s | %s (%s) | %s |", alg,
			spread(us["full"]), spread(us["lean"]), leanOne, ratios(us, "lean", "full"),
			spread(us["full2"]), spread(us["lean2"]), leanTwo, ratios(us, "lean2", "full2")))
		if fixed {
			ref = us
		}
	}
	fmt.Println()
	fmt.Println("| algorithm | one limit: full µs | lean µs (script) | lean ÷ full | two limits: full µs | lean µs (script) | lean ÷ full |")
	fmt.Println("|---|---|---|---|---|---|---|")
	for _, r := range rows {
		fmt.Println(r)
	}
	if ref != nil {
		fmt.Println()
		fmt.Println("| fixed_window, one limit | µs per decision | ÷ INCRBY + PEXPIRE |")
		fmt.Println("|---|---|---|")
		fmt.Printf("| INCRBY + PEXPIRE pipeline (envoyproxy/ratelimit) | %s | 1 |\n", spread(ref["incr"]))
		fmt.Printf("| counted, as the store sends it (INCRBY + PEXPIRE, no script) | %s | %s |\n", spread(ref["counted"]), ratios(ref, "counted", "incr"))
		fmt.Printf("| script that only returns the reply | %s | %s |\n", spread(ref["reply"]), ratios(ref, "reply", "incr"))
		fmt.Printf("| lean script (%s) | %s | %s |\n", store.leanest(&decide.Call{Algorithm: decide.FixedWindow, Limits: []decide.Limit{{}}}),
			spread(ref["lean"]), ratios(ref, "lean", "incr"))
		fmt.Printf("| full script | %s | %s |\n", spread(ref["full"]), ratios(ref, "full", "incr"))
	}
}

// replyOnly is a script that returns the reply of an admission and does
// nothing else, called as the one-limit scripts are: what any script with
// that reply costs.
func replyOnly(t *testing.T, client *redis.Client) cpuLoad {
	sc := redis.NewScript("return {1, 0, 0, 1000, 999, 1000, 0}")
	if err := sc.Load(context.Background(), client).Err(); err != nil {
		t.Fatal(err)
	}
	return cpuLoad{name: "reply", queue: func(ctx context.Context, pipe redis.Pipeliner, client string) []redis.Cmder {
		return []redis.Cmder{sc.EvalSha(ctx, pipe, []string{"cpu:reply:{ip=" + client + "}"}, int64(0), int64(1), int64(1000), int64(1000))}
	}}
}

// countedLoad decides c, a counted call, as the store sends it: INCRBY and
// PEXPIRE on the key of its window, placed by this process's clock (the
// store's estimate of the server's: the same here). The key is named as the
// limiter names that of a fixed-window rule "bench-fw" keyed by the client's
// IP, under the default prefix: rw:{bench-fw|ip=<client>}:fw:<per>:<window>.
func countedLoad(c decide.Call) cpuLoad {
	return cpuLoad{name: "counted", queue: func(ctx context.Context, pipe redis.Pipeliner, client string) []redis.Cmder {
		c := c
		c.Keys = decide.Keys{State: "rw:{bench-fw|ip=" + client + "}:fw"}
		c.NowMs = time.Now().UnixMilli()
		sc := countedCall(&c)
		var arena []any
		_ = pipe.BatchProcess(ctx, sc.commands(ctx, &arena, nil)...)
		return []redis.Cmder{sc.incr}
	}}
}

// storeLoad decides c with variant v of its script, as the store sends it,
// on a key per client and load (full and lean keep their states apart).
func storeLoad(name string, store *Store, c decide.Call, v lua.Variant) cpuLoad {
	return cpuLoad{name: name, queue: func(ctx context.Context, pipe redis.Pipeliner, client string) []redis.Cmder {
		c := c
		tag := "cpu:" + name + ":{ip=" + client + "}:" + string(c.Algorithm)
		c.Keys = decide.Keys{State: tag + ":st", Hold: tag + ":hold", Hits: tag + ":hits"}
		sc := store.prepareAs(&c, v)
		keys, args := sc.keysArgs()
		return []redis.Cmder{sc.script.EvalSha(ctx, pipe, keys, args...)}
	}}
}

// cpuLoad is one way of deciding: what one decision sends to Redis.
type cpuLoad struct {
	name string
	// queue adds one decision on key to pipe; the decision's commands are
	// read back with check.
	queue func(ctx context.Context, pipe redis.Pipeliner, client string) []redis.Cmder
}

// cpuEnv is a private redis-server, its pid and a client of it, with the
// knobs of a run.
type cpuEnv struct {
	client   *redis.Client
	pid      string
	conns    int           // concurrent pipelines
	depth    int           // decisions per pipeline
	keys     int           // distinct keys, picked at random
	duration time.Duration // per load and round
}

func newCPUEnv(t *testing.T) *cpuEnv {
	t.Helper()
	e := &cpuEnv{
		conns:    benchenv.Int(t, "BENCH_CONNS", 4),
		depth:    benchenv.Int(t, "BENCH_PIPELINE", 16),
		keys:     benchenv.Int(t, "BENCH_KEYS", 10_000),
		duration: benchenv.Duration(t, "BENCH_DURATION", 3*time.Second),
	}
	e.client = redis.NewClient(&redis.Options{Addr: redistest.StartServer(t), PoolSize: e.conns + 2})
	t.Cleanup(func() { _ = e.client.Close() })
	info, err := e.client.Info(context.Background(), "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if pid, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			e.pid = pid
		}
	}
	if _, err := os.Stat("/proc/" + e.pid + "/stat"); err != nil {
		t.Fatalf("redis-server pid %q: %v", e.pid, err)
	}
	return e
}

// run drives load from e.conns goroutines, each sending pipelines of
// e.depth decisions on random keys for e.duration, and returns the
// decisions made and the CPU time redis-server used meanwhile.
func (e *cpuEnv) run(t *testing.T, l cpuLoad, d time.Duration) (int64, time.Duration) {
	t.Helper()
	ctx := context.Background()
	var n atomic.Int64
	var failed atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	before := proctest.CPU(t, e.pid)
	for w := range e.conns {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			for {
				select {
				case <-stop:
					return
				default:
				}
				pipe := e.client.Pipeline()
				var cmds []redis.Cmder
				for range e.depth {
					cmds = append(cmds, l.queue(ctx, pipe, strconv.Itoa(rng.IntN(e.keys)))...)
				}
				if _, err := pipe.Exec(ctx); err != nil {
					failed.CompareAndSwap(nil, err)
					return
				}
				for _, c := range cmds {
					if err := c.Err(); err != nil {
						failed.CompareAndSwap(nil, err)
						return
					}
				}
				n.Add(int64(e.depth))
			}
		})
	}
	time.Sleep(d)
	close(stop)
	wg.Wait()
	used := proctest.CPU(t, e.pid) - before
	if err, _ := failed.Load().(error); err != nil {
		t.Fatalf("%s: %v", l.name, err)
	}
	return n.Load(), used
}

// compare warms every load up, then runs them in turn, rounds times (A B C
// A B C: the machine's speed drifts), printing the Redis CPU per decision
// of each, and returns it per load and round (µs).
func (e *cpuEnv) compare(t *testing.T, title string, loads []cpuLoad, rounds int) map[string][]float64 {
	t.Helper()
	for _, l := range loads {
		e.run(t, l, e.duration/3)
	}
	us := map[string][]float64{}
	for r := 1; r <= rounds; r++ {
		var line []string
		for _, l := range loads {
			n, cpu := e.run(t, l, e.duration)
			v := float64(cpu.Microseconds()) / float64(n)
			us[l.name] = append(us[l.name], v)
			line = append(line, fmt.Sprintf("%s %.2f (%.0f/s)", l.name, v, float64(n)/e.duration.Seconds()))
		}
		fmt.Printf("%s round %d: µs per decision %s\n", title, r, strings.Join(line, ", "))
	}
	return us
}

// ratios returns a ÷ b per round as "median (min – max)".
func ratios(us map[string][]float64, a, b string) string {
	var vs []float64
	for i := range us[a] {
		vs = append(vs, us[a][i]/us[b][i])
	}
	return spread(vs)
}

// spread returns "median (min – max)" of vs, to two decimals.
func spread(vs []float64) string {
	lo, hi := slices.Min(vs), slices.Max(vs)
	if fmt.Sprintf("%.2f", lo) == fmt.Sprintf("%.2f", hi) {
		return fmt.Sprintf("%.2f", lo)
	}
	return fmt.Sprintf("%.2f (%.2f – %.2f)", median(vs), lo, hi)
}

func median(vs []float64) float64 {
	s := slices.Sorted(slices.Values(vs))
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// incrExpire is what envoyproxy/ratelimit sends per decision of a fixed
// window: INCRBY and an expiry, pipelined, on the key it names for a
// remote_address descriptor of the client in domain "bench", the window's
// start in seconds last: bench_remote_address_<client>_<start>.
func incrExpire(ctx context.Context, pipe redis.Pipeliner, client string) []redis.Cmder {
	key := "bench_remote_address_" + client + "_" + strconv.FormatInt(time.Now().Unix(), 10)
	return []redis.Cmder{pipe.IncrBy(ctx, key, 1), pipe.PExpire(ctx, key, time.Second)}
}
