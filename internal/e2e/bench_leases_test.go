//go:build bench

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/testkit/benchenv"

	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden/internal/testkit/kafkatest"
	"github.com/ratewarden/ratewarden/internal/testkit/proctest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// TestBenchLeases (make bench) measures leased budgets on a hot key: one
// client IP behind every request, sent by one cmd/loadgen to three limiter
// processes (BENCH_LIMITERS) on one Redis, a rule of 1e9 requests a minute
// (a token bucket: 1e7 a second) so that nearly every request is admitted
// and leases stay full, events to an embedded broker. The same rule
// unleased and leased (lease: true) take turns within each of BENCH_ROUNDS
// rounds (unleased first in odd rounds,
// leased first in even ones), each run on fresh limiters and broker, so
// that the machine's drift hits both alike. Per run: decisions/s at
// BENCH_CONNS keep-alive connections shared by the limiters; the commands
// Redis ran per decision (INFO total_commands_processed, which counts the
// commands scripts run, less the INFO calls), the scripts it ran per
// decision (EVAL and EVALSHA), and the round trips the limiters sent
// (rate_limit_redis_pipeline_calls_count); the CPU per decision of the
// limiters, of Redis and of the load generator; the share answered from
// leases; then p50, p99, p99.9 and the limiters' CPU per decision at half
// that maximum, after a warm-up run of BENCH_HALF_WARMUP at that rate.
// Redis is a private redis-server, so its statistics and CPU are this
// load's alone. After each leased run comes the floor: as many
// deploy/local/floorserver processes as limiters, each giving every request
// the answer the leased limiters gave (the same status, headers and body,
// recorded from them) with no decision, Redis or event behind it, driven
// by the same load generator at most, then at the leased half rate as the
// limiters were: what the bare HTTP exchange costs at the same rate, set
// beside the leased decision's CPU and p99. It prints a line per run, then
// Markdown tables: median (min – max) over the rounds, and leased ÷
// unleased and leased ÷ floor per round as min – max.
func TestBenchLeases(t *testing.T) {
	b := leaseBench{
		rounds:    benchenv.Int(t, "BENCH_ROUNDS", 3),
		duration:  benchenv.Duration(t, "BENCH_DURATION", 5*time.Second),
		warmup:    benchenv.Duration(t, "BENCH_HALF_WARMUP", 2*time.Second),
		conns:     benchenv.Int(t, "BENCH_CONNS", 48),
		instances: benchenv.Int(t, "BENCH_LIMITERS", 3),
		loadgen:   loadgenBinary(t),
		floor:     floorBinary(t),
	}
	algs := strings.Fields(os.Getenv("BENCH_ALGORITHMS"))
	if len(algs) == 0 {
		algs = []string{"fixed_window", "sliding_window_counter", "token_bucket"}
	}
	b.redisAddr = redistest.StartServer(t)
	b.rdb = redis.NewClient(&redis.Options{Addr: b.redisAddr})
	defer b.rdb.Close()
	b.redisPID = infoField(t, b.rdb, "server", "process_id")
	fmt.Printf("lease setup: %d limiters, %d connections, one client IP, %s per run, %d rounds, a private redis-server\n",
		b.instances, b.conns, b.duration, b.rounds)

	results := map[string]map[bool][]leaseRun{}
	floors := map[string][]floorRun{}
	for _, alg := range algs {
		results[alg] = map[bool][]leaseRun{}
		for r := 1; r <= b.rounds; r++ {
			order := []bool{false, true}
			if r%2 == 0 {
				order = []bool{true, false}
			}
			for _, leased := range order {
				run := b.run(t, alg, leased, r)
				results[alg][leased] = append(results[alg][leased], run)
				fmt.Printf("lease %s %s round %d: %s\n", alg, leaseName(leased), r, run)
				if leased {
					f := b.floorRun(t, alg, r, run)
					floors[alg] = append(floors[alg], f)
					fmt.Printf("lease %s floor round %d: %s; leased ÷ floor: decisions/s %.2f, CPU at each one's maximum %.2f, at %.0f/s CPU %.2f p99 %.2f\n",
						alg, r, f, run.rps/f.rps, run.limUS/f.cpuUS, run.halfRate, run.halfLimUS/f.halfCPUUS, run.p99/f.p99)
				}
			}
			u, l := results[alg][false][r-1], results[alg][true][r-1]
			fmt.Printf("lease %s round %d leased ÷ unleased: decisions/s %.2f, limiter CPU %.2f, Redis CPU %.2f, Redis commands %.4f, p99 at half %.2f\n",
				alg, r, l.rps/u.rps, l.limUS/u.limUS, l.redisUS/u.redisUS, l.commands/u.commands, l.p99/u.p99)
		}
	}
	b.print(algs, results)
	b.printFloor(algs, results, floors)
}

// leaseBench is TestBenchLeases' setting: its knobs, the load generator
// and the private Redis.
type leaseBench struct {
	rounds, conns, instances int
	duration, warmup         time.Duration
	loadgen, floor           string
	redisAddr, redisPID      string
	rdb                      *redis.Client
}

// leaseRun is one run: the maximum, then half of it.
type leaseRun struct {
	rps        float64
	decisions  float64
	commands   float64 // Redis commands per decision, scripts' own included
	scripts    float64 // EVAL and EVALSHA per decision
	trips      float64 // round trips the limiters sent, per decision
	fromLease  float64 // share of decisions answered from a lease
	notOK      float64 // decisions other than reason ok
	limUS      float64 // the limiters' CPU per decision, summed
	redisUS    float64
	loadgenUS  float64
	brokerUS   float64 // this process: the embedded broker, mostly
	halfRate   float64
	p50, p99   float64 // ms at half the maximum
	p999       float64
	late       float64 // requests at half the maximum sent over 1 ms late
	halfLimUS  float64 // the limiters' CPU per decision at half the maximum
	answer     []byte  // leased runs: the limiters' answer, as `curl -si` prints it
	topCommand string  // the commands Redis ran most, per decision
	reasons    string  // the reasons of the decisions not ok, with their counts
	load       string  // the machine's load average when the run started
}

func (r leaseRun) String() string {
	return fmt.Sprintf("[load %s] %.0f decisions/s (%.0f, %.0f not ok%s), Redis commands/decision %.4f (scripts %.4f, limiter round trips %.4f; %s), "+
		"from lease %.4f, CPU µs/decision limiters %.1f Redis %.2f loadgen %.1f broker %.1f; at %.0f/s p50 %.3f ms p99 %.3f ms p99.9 %.3f ms (%.0f late)",
		r.load, r.rps, r.decisions, r.notOK, r.reasons, r.commands, r.scripts, r.trips, r.topCommand, r.fromLease, r.limUS, r.redisUS, r.loadgenUS, r.brokerUS,
		r.halfRate, r.p50, r.p99, r.p999, r.late)
}

func leaseName(leased bool) string {
	if leased {
		return "leased"
	}
	return "unleased"
}

// leaseRule is one rule of alg on /lease/** keyed by client IP, at 1e9
// requests a minute; a token bucket of 1e7 a second and as many in burst
// (a burst of 1e9 over a minute is past what the rules allow: burst × 1000
// × per in ms at most 2^53).
func leaseRule(alg string, leased bool) string {
	limits := "[{requests: 1000000000, per: 1m}]"
	if alg == "token_bucket" {
		limits = "[{rate: 10000000, per: 1s, burst: 10000000}]"
	}
	return fmt.Sprintf("rules:\n  - {id: lease-bench, match: {endpoints: [\"/lease/**\"]}, key: [ip], algorithm: %s, limits: %s, lease: %t}\n",
		alg, limits, leased)
}

// run starts a broker and the limiters, loads them, and stops them.
func (b *leaseBench) run(t *testing.T, alg string, leased bool, round int) leaseRun {
	var res leaseRun
	t.Run(fmt.Sprintf("%s/%s/%d", alg, leaseName(leased), round), func(t *testing.T) {
		broker := kafkatest.StartBroker(t, decisionsTopic, bansTopic, outcomesTopic)
		rulesFile := filepath.Join(t.TempDir(), "rules.yaml")
		if err := os.WriteFile(rulesFile, []byte(leaseRule(alg, leased)), 0o600); err != nil {
			t.Fatal(err)
		}
		vars := map[string]string{
			"KAFKA_BROKERS": broker.Addr(), "REDIS_URL": "redis://" + b.redisAddr + "/0", "RULES_FILE": rulesFile,
			"REDIS_KEY_PREFIX": fmt.Sprintf("lease:%s:%t:%d:", alg, leased, round), "DYNAMIC_RULES": "false",
		}
		loadAvg := loadAverage(t)
		var lims []*proc
		var urls []string
		for i := range b.instances {
			env := maps.Clone(vars)
			env["INSTANCE_ID"] = fmt.Sprintf("l%d", i+1)
			lims = append(lims, start(t, "limiter", env))
			urls = append(urls, "http://"+lims[i].addr)
		}
		load := []string{"-url", strings.Join(urls, ","), "-workers", strconv.Itoa(b.conns), "-keys", "1", "-users", "0",
			"-endpoint", "/lease/books/17", "-progress", "0", "-max-errors", "1"}
		b.loadgenRun(t, append(load, "-duration", "2s")...) // warm-up: connections, scripts, leases

		cpu := func() (lim, red, self time.Duration) {
			for _, l := range lims {
				lim += proctest.CPU(t, strconv.Itoa(l.cmd.Process.Pid))
			}
			return lim, proctest.CPU(t, b.redisPID), proctest.CPU(t, "self")
		}
		metric := func(name string) (sum float64) {
			for _, l := range lims {
				sum += l.metric(t, name)
			}
			return sum
		}
		stats0 := redisStats(t, b.rdb)
		lease0, trips0 := metric("rate_limit_lease_decisions_total"), metric("rate_limit_redis_pipeline_calls_count")
		lim0, red0, self0 := cpu()
		s, loadCPU := b.loadgenRun(t, append(load, "-duration", b.duration.String())...)
		lim1, red1, self1 := cpu()
		stats1 := redisStats(t, b.rdb)
		lease1, trips1 := metric("rate_limit_lease_decisions_total"), metric("rate_limit_redis_pipeline_calls_count")

		n := s["requests"]
		res = leaseRun{load: loadAvg, rps: s["rps"], decisions: n, notOK: n - s["reason_ok"], fromLease: (lease1 - lease0) / n, trips: (trips1 - trips0) / n,
			limUS: perDecision(lim1-lim0, n), redisUS: perDecision(red1-red0, n), brokerUS: perDecision(self1-self0, n),
			loadgenUS: perDecision(loadCPU, n)}
		for _, k := range slices.Sorted(maps.Keys(s)) {
			if strings.HasPrefix(k, "reason_") && k != "reason_ok" && s[k] > 0 {
				res.reasons += fmt.Sprintf(": %s %.0f", strings.TrimPrefix(k, "reason_"), s[k])
			}
		}
		delta := map[string]float64{}
		for k, v := range stats1 {
			delta[k] = v - stats0[k]
		}
		// The INFO calls are the benchmark's own, not the limiters'.
		res.commands = (delta["total_commands_processed"] - delta["cmdstat_info"]) / n
		res.scripts = (delta["cmdstat_evalsha"] + delta["cmdstat_eval"]) / n
		res.topCommand = topCommands(delta, n)

		res.halfRate = float64(int(res.rps / 2))
		// As the floor will be driven (floorRun), so that the two stand
		// side by side at the same rate.
		var h map[string]float64
		h, res.halfLimUS = b.halfRun(t, load, res.halfRate, func() time.Duration { l, _, _ := cpu(); return l })
		res.p50, res.p99, res.p999, res.late = h["p50_ms"], h["p99_ms"], h["p999_ms"], h["late"]
		if !leased {
			return
		}
		res.answer = recordAnswer(t, lims[0].addr, "/lease/books/17")
	})
	if res.decisions == 0 {
		t.FailNow()
	}
	return res
}

// halfRun loads at rate with load's arguments after a warm-up run of
// BENCH_HALF_WARMUP at that rate (what the maximum before left queued
// drains in it): the measured run's summary, and the CPU per request that
// cpu (the servers' total) grew by over it.
func (b *leaseBench) halfRun(t *testing.T, load []string, rate float64, cpu func() time.Duration) (map[string]float64, float64) {
	t.Helper()
	at := append(slices.Clone(load), "-rate", strconv.Itoa(int(rate)))
	b.loadgenRun(t, append(at, "-duration", b.warmup.String())...)
	before := cpu()
	h, _ := b.loadgenRun(t, append(at, "-duration", b.duration.String())...)
	return h, perDecision(cpu()-before, h["requests"])
}

// floorRun is the floor of one leased run: the floor servers at most, then
// at the leased run's half rate.
type floorRun struct {
	rps, cpuUS          float64 // at most (closed loop), and the floor servers' CPU per request there
	halfCPUUS, p50, p99 float64 // at the leased run's half rate
	p999                float64
	load                string
}

func (f floorRun) String() string {
	return fmt.Sprintf("[load %s] %.0f requests/s, CPU µs/request %.1f; at half the leased maximum CPU µs/request %.1f, p50 %.3f ms p99 %.3f ms p99.9 %.3f ms",
		f.load, f.rps, f.cpuUS, f.halfCPUUS, f.p50, f.p99, f.p999)
}

// floorRun starts as many floor servers as limiters, each giving leased's
// recorded answer, and loads them as run loaded the limiters.
func (b *leaseBench) floorRun(t *testing.T, alg string, round int, leased leaseRun) floorRun {
	var res floorRun
	t.Run(fmt.Sprintf("%s/floor/%d", alg, round), func(t *testing.T) {
		answer := filepath.Join(t.TempDir(), "answer.http")
		if err := os.WriteFile(answer, leased.answer, 0o600); err != nil {
			t.Fatal(err)
		}
		res.load = loadAverage(t)
		var pids, urls []string
		for range b.instances {
			addr := freeAddr(t)
			cmd := exec.Command(b.floor, "-listen", addr, "-answer", answer)
			out := &bytes.Buffer{}
			cmd.Stderr = out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = cmd.Process.Signal(os.Interrupt)
				if err := cmd.Wait(); err != nil {
					t.Errorf("floorserver: %v\n%s", err, out)
				}
			})
			awaitListening(t, addr)
			pids, urls = append(pids, strconv.Itoa(cmd.Process.Pid)), append(urls, "http://"+addr)
		}
		cpu := func() (sum time.Duration) {
			for _, p := range pids {
				sum += proctest.CPU(t, p)
			}
			return sum
		}
		load := []string{"-url", strings.Join(urls, ","), "-workers", strconv.Itoa(b.conns), "-keys", "1", "-users", "0",
			"-endpoint", "/lease/books/17", "-progress", "0", "-max-errors", "1"}
		b.loadgenRun(t, append(load, "-duration", "2s")...) // warm-up, as the limiters'
		before := cpu()
		s, _ := b.loadgenRun(t, append(load, "-duration", b.duration.String())...)
		res.rps, res.cpuUS = s["rps"], perDecision(cpu()-before, s["requests"])
		var h map[string]float64
		h, res.halfCPUUS = b.halfRun(t, load, leased.halfRate, cpu)
		res.p50, res.p99, res.p999 = h["p50_ms"], h["p99_ms"], h["p999_ms"]
	})
	if res.rps == 0 {
		t.FailNow()
	}
	return res
}

// recordAnswer returns what the limiter at addr answers a check of
// cmd/loadgen's first client (100.64.0.0) on endpoint, as `curl -si`
// prints it: what the floor gives.
func recordAnswer(t *testing.T, addr, endpoint string) []byte {
	t.Helper()
	body := fmt.Sprintf(`{"ip":"100.64.0.0","endpoint":%q,"method":"GET"}`, endpoint)
	resp, err := http.Post("http://"+addr+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("check: %s", resp.Status)
	}
	raw, err := httputil.DumpResponse(resp, true)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// freeAddr returns a loopback address whose port was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// awaitListening waits until addr accepts connections.
func awaitListening(t *testing.T, addr string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return
		}
	}
	t.Fatalf("nothing listens on %s", addr)
}

var (
	floorOnce sync.Once
	floorPath string
	floorErr  error
)

// floorBinary returns deploy/local/floorserver built beside the services.
func floorBinary(t *testing.T) string {
	t.Helper()
	binary(t, "limiter") // the directory
	floorOnce.Do(func() {
		floorPath = filepath.Join(binDir, "floorserver")
		if out, err := exec.Command("go", "build", "-o", floorPath, "../../deploy/local/floorserver").CombinedOutput(); err != nil {
			floorErr = fmt.Errorf("go build floorserver: %v\n%s", err, out)
		}
	})
	if floorErr != nil {
		t.Fatal(floorErr)
	}
	return floorPath
}

// loadgenRun runs cmd/loadgen with args and returns its summary's numbers
// and the CPU it used.
func (b *leaseBench) loadgenRun(t *testing.T, args ...string) (map[string]float64, time.Duration) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "summary.env")
	cmd := exec.Command(b.loadgen, append(args, "-summary-file", file)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("loadgen %v: %v\n%s", args, err, out)
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	s := map[string]float64{}
	for line := range strings.Lines(string(raw)) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), "=")
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			s[k] = f
		}
	}
	return s, cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
}

var (
	loadgenOnce sync.Once
	loadgenPath string
	loadgenErr  error
)

// loadgenBinary returns cmd/loadgen built beside the services.
func loadgenBinary(t *testing.T) string {
	t.Helper()
	binary(t, "limiter") // the directory
	loadgenOnce.Do(func() {
		loadgenPath = filepath.Join(binDir, "loadgen")
		if out, err := exec.Command("go", "build", "-o", loadgenPath, "../../cmd/loadgen").CombinedOutput(); err != nil {
			loadgenErr = fmt.Errorf("go build loadgen: %v\n%s", err, out)
		}
	})
	if loadgenErr != nil {
		t.Fatal(loadgenErr)
	}
	return loadgenPath
}

// redisStats returns INFO stats' total_commands_processed and each
// command's calls from INFO commandstats, as cmdstat_<name>.
func redisStats(t *testing.T, rdb *redis.Client) map[string]float64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "stats", "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for line := range strings.Lines(info) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		if k == "total_commands_processed" {
			out[k], _ = strconv.ParseFloat(v, 64)
		}
		if strings.HasPrefix(k, "cmdstat_") {
			calls, _, _ := strings.Cut(strings.TrimPrefix(v, "calls="), ",")
			out[k], _ = strconv.ParseFloat(calls, 64)
		}
	}
	return out
}

// topCommands names the four commands Redis ran most in delta, per
// decision.
func topCommands(delta map[string]float64, n float64) string {
	var names []string
	for k, v := range delta {
		if strings.HasPrefix(k, "cmdstat_") && k != "cmdstat_info" && v > 0 {
			names = append(names, k)
		}
	}
	slices.SortFunc(names, func(a, b string) int { return int(delta[b] - delta[a]) })
	var parts []string
	for _, k := range names[:min(4, len(names))] {
		parts = append(parts, fmt.Sprintf("%s %.4f", strings.TrimPrefix(k, "cmdstat_"), delta[k]/n))
	}
	return strings.Join(parts, " ")
}

func infoField(t *testing.T, rdb *redis.Client, section, field string) string {
	t.Helper()
	info, err := rdb.Info(context.Background(), section).Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	t.Fatalf("INFO %s has no %s", section, field)
	return ""
}

// loadAverage is the machine's load average over the last minute, from
// /proc/loadavg: what else ran on the machine, which this benchmark shares.
func loadAverage(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(raw))[0]
}

func perDecision(cpu time.Duration, n float64) float64 { return float64(cpu.Microseconds()) / n }

// print writes the Markdown tables of the runs.
func (b *leaseBench) print(algs []string, results map[string]map[bool][]leaseRun) {
	fmt.Println()
	fmt.Println("| algorithm | rule | decisions/s | Redis commands per decision | scripts per decision | limiter round trips per decision | from a lease | CPU µs/decision limiters | Redis | loadgen | at half the maximum: rate | p50 ms | p99 ms | p99.9 ms |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, alg := range algs {
		for _, leased := range []bool{false, true} {
			rs := results[alg][leased]
			col := func(format string, f func(leaseRun) float64) string {
				var vs []float64
				for _, r := range rs {
					vs = append(vs, f(r))
				}
				return medianRange(format, vs)
			}
			fmt.Printf("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", alg, leaseName(leased),
				col("%.0f", func(r leaseRun) float64 { return r.rps }),
				col("%.4f", func(r leaseRun) float64 { return r.commands }),
				col("%.4f", func(r leaseRun) float64 { return r.scripts }),
				col("%.4f", func(r leaseRun) float64 { return r.trips }),
				col("%.4f", func(r leaseRun) float64 { return r.fromLease }),
				col("%.1f", func(r leaseRun) float64 { return r.limUS }),
				col("%.2f", func(r leaseRun) float64 { return r.redisUS }),
				col("%.1f", func(r leaseRun) float64 { return r.loadgenUS }),
				col("%.0f", func(r leaseRun) float64 { return r.halfRate }),
				col("%.3f", func(r leaseRun) float64 { return r.p50 }),
				col("%.3f", func(r leaseRun) float64 { return r.p99 }),
				col("%.3f", func(r leaseRun) float64 { return r.p999 }))
		}
	}
	fmt.Println()
	fmt.Println("| algorithm | leased ÷ unleased per round | decisions/s | CPU per decision limiters | Redis | Redis commands per decision | p99 at half each one's maximum |")
	fmt.Println("|---|---|---|---|---|---|---|")
	for _, alg := range algs {
		u, l := results[alg][false], results[alg][true]
		ratio := func(f func(leaseRun) float64) string {
			var vs []float64
			for i := range u {
				vs = append(vs, f(l[i])/f(u[i]))
			}
			return spanOf("%.2f", vs)
		}
		ratio4 := func(f func(leaseRun) float64) string { // commands: leased runs send two orders of magnitude fewer
			var vs []float64
			for i := range u {
				vs = append(vs, f(l[i])/f(u[i]))
			}
			return spanOf("%.4f", vs)
		}
		fmt.Printf("| %s | min – max | %s | %s | %s | %s | %s |\n", alg,
			ratio(func(r leaseRun) float64 { return r.rps }),
			ratio(func(r leaseRun) float64 { return r.limUS }),
			ratio(func(r leaseRun) float64 { return r.redisUS }),
			ratio4(func(r leaseRun) float64 { return r.commands }),
			ratio(func(r leaseRun) float64 { return r.p99 }))
	}
}

// medianRange is "median (min – max)" of vs in format, one value when
// they print alike.
func medianRange(format string, vs []float64) string {
	s := slices.Sorted(slices.Values(vs))
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	if span := spanOf(format, vs); span != fmt.Sprintf(format, m) {
		return fmt.Sprintf(format+" (%s)", m, span)
	}
	return fmt.Sprintf(format, m)
}

// spanOf is "min – max" of vs in format, one value when they print alike.
func spanOf(format string, vs []float64) string {
	lo, hi := fmt.Sprintf(format, slices.Min(vs)), fmt.Sprintf(format, slices.Max(vs))
	if lo == hi {
		return lo
	}
	return lo + " – " + hi
}

// printFloor writes the table of the leased runs beside their floors.
func (b *leaseBench) printFloor(algs []string, results map[string]map[bool][]leaseRun, floors map[string][]floorRun) {
	fmt.Println()
	fmt.Println("| algorithm | leased ÷ floor | decisions/s | CPU µs/decision at each one's maximum | at half the leased maximum: CPU µs | p99 ms |")
	fmt.Println("|---|---|---|---|---|---|")
	for _, alg := range algs {
		l, f := results[alg][true], floors[alg]
		col := func(format string, of func(leaseRun, floorRun) (float64, float64)) string {
			var ls, fs, rs []float64
			for i := range f {
				a, b := of(l[i], f[i])
				ls, fs, rs = append(ls, a), append(fs, b), append(rs, a/b)
			}
			return fmt.Sprintf("%s (%s ÷ %s)", spanOf("%.2f", rs), medianRange(format, ls), medianRange(format, fs))
		}
		fmt.Printf("| %s | min – max (leased ÷ floor, median (min – max)) | %s | %s | %s | %s |\n", alg,
			col("%.0f", func(l leaseRun, f floorRun) (float64, float64) { return l.rps, f.rps }),
			col("%.1f", func(l leaseRun, f floorRun) (float64, float64) { return l.limUS, f.cpuUS }),
			col("%.1f", func(l leaseRun, f floorRun) (float64, float64) { return l.halfLimUS, f.halfCPUUS }),
			col("%.3f", func(l leaseRun, f floorRun) (float64, float64) { return l.p99, f.p99 }))
	}
}
