package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// slowRules are one rule per algorithm, 100 requests an hour per address,
// each limiting locally when Redis is down (the default policy).
const slowRules = `
rules:
  - {id: fw,  match: {endpoints: ["/fw"]},  key: [ip], algorithm: fixed_window,           limits: [{requests: 100, per: 1h}]}
  - {id: sw,  match: {endpoints: ["/sw"]},  key: [ip], algorithm: sliding_window,         limits: [{requests: 100, per: 1h}]}
  - {id: swc, match: {endpoints: ["/swc"]}, key: [ip], algorithm: sliding_window_counter, limits: [{requests: 100, per: 1h}]}
  - {id: tb,  match: {endpoints: ["/tb"]},  key: [ip], algorithm: token_bucket,           limits: [{rate: 1, per: 1h, burst: 100}]}
`

// A slow Redis is not a dead one: three limiters whose Redis holds back
// every fifth reply past REDIS_TIMEOUT (the scripts have run and counted;
// the limiter answers its client without them) admit at most the limit,
// for every algorithm, and once the late replies are in, what Redis
// counted for the requests refused meanwhile has been given back: a fourth
// limiter, on a direct connection, then admits exactly the rest.
func TestSlowRedisAdmitsExactlyTheLimit(t *testing.T) {
	testkit.AvoidWindowEnd(t, time.Hour, time.Minute)
	e := newEnv(t)
	proxy := redistest.StartSlowProxy(t, redistest.Addr(t))
	rules := writeRules(t, slowRules)
	var limiters []*proc
	for range 3 {
		limiters = append(limiters, e.start("limiter", "RULES_FILE", rules, "REDIS_URL", "redis://"+proxy.Addr()+"/0"))
	}
	sweeper := e.start("limiter", "RULES_FILE", rules)
	proxy.SetDelay(5, 120*time.Millisecond) // REDIS_TIMEOUT is 50ms
	exactThroughSlowRedis(t, limiters, sweeper, "198.51.100.", slowAlgorithms, func() { proxy.SetDelay(0, 0) }, nil)
	if proxy.Delayed() == 0 {
		t.Fatal("no reply was held back: the test did not exercise a slow Redis")
	}
}

// The same on a Redis Cluster whose primaries are slow in turn: each is
// stopped for 120 ms (SIGSTOP), then the next 30 ms later, so the commands
// sent to it run, and count, when it resumes, after their callers'
// REDIS_TIMEOUT.
func TestSlowClusterAdmitsExactlyTheLimit(t *testing.T) {
	s := startClusterSystem(t, 4, 100)
	stop := make(chan struct{})
	var stopped sync.WaitGroup
	stopped.Go(func() {
		for {
			for _, n := range s.cluster.Primaries() {
				n.Pause()
				time.Sleep(120 * time.Millisecond)
				n.Resume()
				select {
				case <-stop:
					return
				case <-time.After(30 * time.Millisecond):
				}
			}
		}
	})
	exactThroughSlowRedis(t, s.limiters[:3], s.limiters[3], "203.0.113.", slowAlgorithms, func() { close(stop); stopped.Wait() }, nil)
}

// slowLeasedRules are leased rules (docs/leases.md), 100 an hour per
// address, each lending up to 10 units at a time.
const slowLeasedRules = `
rules:
  - {id: lfw,  match: {endpoints: ["/lfw"]},  key: [ip], algorithm: fixed_window,           limits: [{requests: 100, per: 1h}], lease: {max_units: 10}}
  - {id: lswc, match: {endpoints: ["/lswc"]}, key: [ip], algorithm: sliding_window_counter, limits: [{requests: 100, per: 1h}], lease: {max_units: 10}}
  - {id: ltb,  match: {endpoints: ["/ltb"]},  key: [ip], algorithm: token_bucket,           limits: [{rate: 1, per: 1h, burst: 100}], lease: {max_units: 10}}
`

// The same with leased rules: a renewal whose reply comes late lends units
// nobody holds, and they go back too. The slow limiters stop before the
// sweep, giving back the leases they hold (as every limiter does at its
// stop), so what is left is the sweep's.
func TestSlowRedisLeasedRulesAdmitExactlyTheLimit(t *testing.T) {
	testkit.AvoidWindowEnd(t, time.Hour, time.Minute)
	e := newEnv(t)
	proxy := redistest.StartSlowProxy(t, redistest.Addr(t))
	rules := writeRules(t, slowLeasedRules)
	var limiters []*proc
	for range 3 {
		limiters = append(limiters, e.start("limiter", "RULES_FILE", rules, "REDIS_URL", "redis://"+proxy.Addr()+"/0"))
	}
	sweeper := e.start("limiter", "RULES_FILE", rules)
	proxy.SetDelay(5, 120*time.Millisecond) // REDIS_TIMEOUT is 50ms
	exactThroughSlowRedis(t, limiters, sweeper, "198.51.100.", []string{"lfw", "lswc", "ltb"},
		func() { proxy.SetDelay(0, 0) },
		func() {
			granted := 0.0
			for _, l := range limiters {
				granted += l.metric(t, "rate_limit_lease_units_granted_total")
				l.stop(syscall.SIGTERM)
			}
			t.Logf("%v units lent to the slow limiters", granted)
			if granted == 0 {
				t.Fatal("no unit was lent: the test did not exercise leases")
			}
		})
}

// exactThroughSlowRedis sends, for each rule (its endpoint), 600 requests
// of one address from 200 concurrent clients through limiters whose Redis
// is slow, calls fast when they are answered, waits for every late reply
// and give-back, calls settled (unless nil), then sweeps the rest through
// sweeper: admitted through the slow limiters and the sweep must be 100,
// the limit, exactly.
func exactThroughSlowRedis(t *testing.T, limiters []*proc, sweeper *proc, net string, endpoints []string, fast, settled func()) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}, Timeout: 10 * time.Second}
	check := func(lim *proc, ip, alg string) (allowed bool, err error) {
		body := fmt.Sprintf(`{"ip":%q,"endpoint":"/%s"}`, ip, alg)
		resp, err := client.Post("http://"+lim.addr+"/v1/check", "application/json", strings.NewReader(body))
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		d := decision{Status: resp.StatusCode}
		if err := json.NewDecoder(resp.Body).Decode(&d); err != nil || d.Status != http.StatusOK {
			return false, fmt.Errorf("status %d, %v", d.Status, err)
		}
		return d.Allowed, nil
	}
	slow := map[string]int64{}
	for i, alg := range endpoints {
		ip := fmt.Sprintf("%s%d", net, 200+i)
		var admitted, failed atomic.Int64
		var wg sync.WaitGroup
		for g := range 200 {
			lim := limiters[g%len(limiters)]
			wg.Go(func() {
				for range 3 {
					ok, err := check(lim, ip, alg)
					if err != nil {
						failed.Add(1)
					} else if ok {
						admitted.Add(1)
					}
				}
			})
		}
		wg.Wait()
		if failed.Load() != 0 {
			t.Errorf("%s: %d requests failed", alg, failed.Load())
		}
		slow[alg] = admitted.Load()
	}
	timeouts := 0.0
	for _, l := range limiters {
		timeouts += l.metric(t, "rate_limit_redis_errors_total", `class="timeout"`)
	}
	if timeouts == 0 {
		t.Fatal("no round trip timed out: the test did not exercise a slow Redis")
	}
	fast()
	given, dropped := awaitGiveBacks(t, limiters)
	if settled != nil {
		settled()
	}
	for i, alg := range endpoints {
		ip := fmt.Sprintf("%s%d", net, 200+i)
		var swept int64
		for range 150 {
			ok, err := check(sweeper, ip, alg)
			if err != nil {
				t.Fatalf("%s: sweep: %v", alg, err)
			}
			if ok {
				swept++
			}
		}
		t.Logf("%s: %d admitted through the slow limiters + %d by the sweep (limit 100)", alg, slow[alg], swept)
		requireExact(t, alg, slow[alg]+swept, dropped)
	}
	t.Logf("%v round trips timed out, %v give-backs, %v dropped", timeouts, given, dropped)
}

// awaitGiveBacks waits until no limiter awaits a late reply or holds a
// give-back, and returns the give-backs made and those dropped.
func awaitGiveBacks(t *testing.T, limiters []*proc) (given, dropped float64) {
	t.Helper()
	testkit.WaitFor(t, 30*time.Second, "the late replies and their give-backs", func() bool {
		for _, l := range limiters {
			if l.metric(t, "rate_limit_redis_give_backs_pending") != 0 {
				return false
			}
		}
		return true
	})
	for _, l := range limiters {
		given += l.metric(t, "rate_limit_redis_give_backs_total")
		dropped += l.metric(t, "rate_limit_redis_give_backs_dropped_total")
	}
	return given, dropped
}

// requireExact requires admitted, in all, to be the limit of 100: never
// more, and less only by what give-backs dropped (a late reply that never
// came, counted) could hold.
func requireExact(t *testing.T, alg string, admitted int64, dropped float64) {
	t.Helper()
	if admitted > 100 || float64(admitted) < 100-dropped {
		t.Errorf("%s: %d admitted in all, want exactly the limit of 100 (%v give-backs dropped)", alg, admitted, dropped)
	}
}
