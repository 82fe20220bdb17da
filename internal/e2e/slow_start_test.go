package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/proctest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// slowAlgorithms are the rules of slowRules, one per algorithm.
var slowAlgorithms = []string{"fw", "sw", "swc", "tb"}

// loadTally counts the answers of a load.
type loadTally struct {
	admitted, refused, failed, notRedis atomic.Int64
	admittedNotRedis                    atomic.Int64 // admitted by a decision not made in Redis
}

// sendLoad sends goroutines×each checks of body, spread over limiters.
func sendLoad(limiters []*proc, body string, goroutines, each int) *loadTally {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	tally := &loadTally{}
	var wg sync.WaitGroup
	for g := range goroutines {
		lim := limiters[g%len(limiters)]
		wg.Go(func() {
			for range each {
				resp, err := client.Post("http://"+lim.addr+"/v1/check", "application/json", strings.NewReader(body))
				if err != nil {
					tally.failed.Add(1)
					continue
				}
				d := decision{Status: resp.StatusCode}
				err = json.NewDecoder(resp.Body).Decode(&d)
				resp.Body.Close()
				switch {
				case err != nil || d.Status != http.StatusOK:
					tally.failed.Add(1)
					continue
				case d.Allowed:
					tally.admitted.Add(1)
				default:
					tally.refused.Add(1)
				}
				if d.Mode != "redis" {
					tally.notRedis.Add(1)
					if d.Allowed {
						tally.admittedNotRedis.Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	return tally
}

// sweepRest sends n checks of body to lim one after the other and returns
// how many it admitted: what the limiters before it left of the limit.
func sweepRest(t *testing.T, lim *proc, body string, n int) int {
	t.Helper()
	admitted := 0
	for range n {
		if postCheck(t, lim, body).Allowed {
			admitted++
		}
	}
	return admitted
}

// A Redis that is slow before the limiters start is not a dead one: every
// fifth chunk of replies comes 120ms late (REDIS_TIMEOUT is 50ms) from the
// first connection on. The three limiters still warm up, stay in redis
// mode, decide every request there, and admit at most the limit; once the
// late replies are in, a fourth limiter on a direct connection sweeps
// exactly the rest.
func TestSlowRedisFromStartStaysInRedis(t *testing.T) {
	e := newEnv(t)
	proxy := redistest.StartSlowProxy(t, redistest.Addr(t))
	proxy.SetDelay(5, 120*time.Millisecond) // before the limiters start
	rules := writeRules(t, slowRules)
	var limiters []*proc
	for i := range 3 {
		limiters = append(limiters, e.start("limiter", "RULES_FILE", rules, "REDIS_URL", "redis://"+proxy.Addr()+"/0",
			"INSTANCE_ID", fmt.Sprintf("slow-start-%d", i+1), "REDIS_HEALTH_INTERVAL", "200ms"))
	}
	for _, l := range limiters {
		if got := l.metric(t, "rate_limit_warmup_complete"); got != 1 {
			t.Errorf("limiter %s: warm-up incomplete through a slow Redis", l.addr)
		}
		if mode := readyMode(t, l); mode != "redis" {
			t.Errorf("limiter %s: mode %q after the warm-up, want redis", l.addr, mode)
		}
	}
	through := map[string]int64{}
	for i, alg := range slowAlgorithms {
		body := fmt.Sprintf(`{"ip":"198.51.100.%d","endpoint":"/%s"}`, 100+i, alg)
		tally := sendLoad(limiters, body, 150, 4)
		through[alg] = tally.admitted.Load()
		t.Logf("%s: %d admitted, %d refused of 600 through the slow limiters (limit 100), %d refused by the fallback of a timed-out round trip (mode local)",
			alg, tally.admitted.Load(), tally.refused.Load(), tally.notRedis.Load())
		if tally.failed.Load() != 0 {
			t.Errorf("%s: %d requests failed", alg, tally.failed.Load())
		}
		// A round trip that timed out is refused by the local rule's
		// fallback, and its decision says local; none may admit.
		if tally.admittedNotRedis.Load() != 0 {
			t.Errorf("%s: %d admitted by decisions not made in Redis: a Redis that answers late was taken for a dead one", alg, tally.admittedNotRedis.Load())
		}
		for _, l := range limiters {
			if m := modeGauge(t, l); m["redis"] != 1 {
				t.Errorf("%s: limiter %s left redis mode: %v", alg, l.addr, m)
			}
		}
		if tally.admitted.Load() > 100 {
			t.Errorf("%s: %d admitted through the slow limiters, more than the limit of 100", alg, tally.admitted.Load())
		}
	}
	for _, l := range limiters {
		if mode := readyMode(t, l); mode != "redis" {
			t.Errorf("limiter %s: mode %q after the load, want redis", l.addr, mode)
		}
	}
	if proxy.Delayed() == 0 {
		t.Fatal("no reply was held back: the test did not exercise a slow Redis")
	}
	proxy.SetDelay(0, 0)
	_, dropped := awaitGiveBacks(t, limiters)
	sweeper := e.start("limiter", "RULES_FILE", rules, "INSTANCE_ID", "slow-start-sweeper")
	for i, alg := range slowAlgorithms {
		body := fmt.Sprintf(`{"ip":"198.51.100.%d","endpoint":"/%s"}`, 100+i, alg)
		rest := sweepRest(t, sweeper, body, 150)
		t.Logf("%s: %d through the slow limiters + %d by the sweep = %d (limit 100)", alg, through[alg], rest, through[alg]+int64(rest))
		requireExact(t, alg, through[alg]+int64(rest), dropped)
	}
}

// deadRedisURL is a Redis URL nothing listens at.
func deadRedisURL(t *testing.T) string {
	t.Helper()
	_, port, _ := net.SplitHostPort(proctest.FreeAddr(t))
	return "redis://127.0.0.1:" + port + "/0"
}

// startDeadRedisLimiters starts n limiters on a Redis that never answered
// them, each with env and its own LOCAL_STATE_DIR when dirs is set.
func startDeadRedisLimiters(e *env, rules, redisURL string, dirs []string, extra ...string) []*proc {
	e.t.Helper()
	var limiters []*proc
	for i := range 3 {
		vars := append([]string{"RULES_FILE", rules, "REDIS_URL", redisURL, "REDIS_WARMUP_TIMEOUT", "1s",
			"INSTANCE_ID", fmt.Sprintf("dead-start-%d", i+1)}, extra...)
		if dirs != nil {
			vars = append(vars, "LOCAL_STATE_DIR", dirs[i])
		}
		limiters = append(limiters, e.start("limiter", vars...))
	}
	return limiters
}

// requireLocalWithinLimit loads the limiters with every algorithm of
// slowRules (whose failure policy is local) and checks that they admit at
// most the limit in all.
func requireLocalWithinLimit(t *testing.T, limiters []*proc, ipBase int) {
	t.Helper()
	for i, alg := range slowAlgorithms {
		body := fmt.Sprintf(`{"ip":"198.51.100.%d","endpoint":"/%s"}`, ipBase+i, alg)
		tally := sendLoad(limiters, body, 60, 10)
		t.Logf("%s: %d admitted, %d refused of 600 through 3 local limiters (limit 100)", alg, tally.admitted.Load(), tally.refused.Load())
		if tally.failed.Load() != 0 {
			t.Errorf("%s: %d requests failed", alg, tally.failed.Load())
		}
		if tally.admitted.Load() > 100 {
			t.Errorf("%s: %d admitted by 3 local limiters, more than the limit of 100", alg, tally.admitted.Load())
		}
		if tally.admitted.Load() == 0 {
			t.Errorf("%s: nothing admitted: the local limiters did not decide", alg)
		}
	}
}

// Limiters that start while Redis is unreachable never saw each other's
// heartbeats: with LOCAL_EXPECTED_INSTANCES they divide each local limit
// by the fleet's size, so the three admit at most the limit in all.
func TestRedisDeadAtStartExpectedInstances(t *testing.T) {
	e := newEnv(t)
	rules := writeRules(t, slowRules)
	limiters := startDeadRedisLimiters(e, rules, deadRedisURL(t), nil, "LOCAL_EXPECTED_INSTANCES", "3")
	for _, l := range limiters {
		if mode := readyMode(t, l); mode != "local" {
			t.Fatalf("limiter %s: mode %q on a dead Redis, want local", l.addr, mode)
		}
		if got := l.metric(t, "rate_limit_live_instances_source", `source="expected"`); got != 1 {
			t.Errorf("limiter %s: rate_limit_live_instances_source{source=\"expected\"} = %v, want 1", l.addr, got)
		}
	}
	requireLocalWithinLimit(t, limiters, 110)
}

// The same without a configured count: a previous run, which saw the three
// limiters' heartbeats, left the count in each one's LOCAL_STATE_DIR.
func TestRedisDeadAtStartPreviousRunOnDisk(t *testing.T) {
	e := newEnv(t)
	rules := writeRules(t, slowRules)
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	var previous []*proc
	for i := range 3 {
		previous = append(previous, e.start("limiter", "RULES_FILE", rules, "LOCAL_STATE_DIR", dirs[i],
			"INSTANCE_ID", fmt.Sprintf("previous-%d", i+1), "REDIS_HEALTH_INTERVAL", "200ms"))
	}
	for _, l := range previous {
		testkit.WaitFor(t, 15*time.Second, "each limiter to count 3 live instances", func() bool {
			return l.metric(t, "rate_limit_live_instances") == 3
		})
	}
	for _, l := range previous {
		l.stop(syscall.SIGTERM)
	}
	limiters := startDeadRedisLimiters(e, rules, deadRedisURL(t), dirs)
	for _, l := range limiters {
		if got := l.metric(t, "rate_limit_live_instances_source", `source="disk"`); got != 1 {
			t.Errorf("limiter %s: rate_limit_live_instances_source{source=\"disk\"} = %v, want 1", l.addr, got)
		}
	}
	requireLocalWithinLimit(t, limiters, 120)
}

// busyLoops runs n shell busy loops at normal priority until the test ends.
func busyLoops(t *testing.T, n int) {
	t.Helper()
	for range n {
		cmd := exec.Command("sh", "-c", "while :; do :; done")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
}

// Limiters starved of CPU by busy loops at a higher priority (they run
// under nice 19) miss deadlines of their own making: round trips time out
// while Redis answered. Through three of them and a sweep by a fourth at
// normal priority, each algorithm admits exactly the limit once the late
// replies are in.
func TestCPUStarvedLimitersStayWithinTheLimit(t *testing.T) {
	if _, err := exec.LookPath("nice"); err != nil {
		t.Skip("nice: not installed")
	}
	e := newEnv(t)
	rules := writeRules(t, slowRules)
	var limiters []*proc
	for i := range 3 {
		limiters = append(limiters, e.startNiced("limiter", "RULES_FILE", rules,
			"INSTANCE_ID", fmt.Sprintf("starved-%d", i+1), "REDIS_HEALTH_INTERVAL", "200ms"))
	}
	busyLoops(t, max(2, runtime.NumCPU()+1))
	through := map[string]int64{}
	for i, alg := range slowAlgorithms {
		body := fmt.Sprintf(`{"ip":"198.51.100.%d","endpoint":"/%s"}`, 130+i, alg)
		tally := sendLoad(limiters, body, 150, 4)
		through[alg] = tally.admitted.Load()
		t.Logf("%s: %d admitted, %d refused, %d failed of 600 through 3 starved limiters (limit 100), %d not in redis mode",
			alg, tally.admitted.Load(), tally.refused.Load(), tally.failed.Load(), tally.notRedis.Load())
		if tally.admitted.Load() > 100 {
			t.Errorf("%s: %d admitted through the starved limiters, more than the limit of 100", alg, tally.admitted.Load())
		}
	}
	_, dropped := awaitGiveBacks(t, limiters)
	sweeper := e.start("limiter", "RULES_FILE", rules, "INSTANCE_ID", "starved-sweeper")
	for i, alg := range slowAlgorithms {
		body := fmt.Sprintf(`{"ip":"198.51.100.%d","endpoint":"/%s"}`, 130+i, alg)
		rest := sweepRest(t, sweeper, body, 150)
		t.Logf("%s: %d through the starved limiters + %d by the sweep = %d (limit 100)", alg, through[alg], rest, through[alg]+int64(rest))
		requireExact(t, alg, through[alg]+int64(rest), dropped)
	}
}
