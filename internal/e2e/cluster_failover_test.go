package e2e

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/testkit"
)

// failoverLoad sends checks for every target from one client per target
// and limiter, each waiting for its answer and then pause, until stopped.
type failoverLoad struct {
	mu       sync.Mutex
	admitted map[target]int
	modes    map[target]map[string]int
	// redisAfter is the first time a target was decided in Redis after
	// the cluster was healthy again (zero: not yet); deniedAfter says it
	// was also denied there, so its count in Redis had reached the limit.
	redisAfter  map[target]time.Time
	deniedAfter map[target]bool
	healthyAt   time.Time
	failures    []error
	stopping    chan struct{}
	stopOnce    sync.Once
	wg          sync.WaitGroup
}

func startFailoverLoad(s *clusterSystem, tgs []target, pause time.Duration) *failoverLoad {
	l := &failoverLoad{admitted: map[target]int{}, modes: map[target]map[string]int{},
		redisAfter: map[target]time.Time{}, deniedAfter: map[target]bool{}, stopping: make(chan struct{})}
	httpc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: len(tgs)}}
	for _, tg := range tgs { // before any goroutine reads the map
		l.modes[tg] = map[string]int{}
	}
	for _, tg := range tgs {
		for _, lim := range s.limiters {
			l.wg.Go(func() {
				for {
					select {
					case <-l.stopping:
						return
					default:
					}
					a := clusterCheck(httpc, lim, tg)
					l.record(tg, a)
					time.Sleep(pause)
				}
			})
		}
	}
	return l
}

func (l *failoverLoad) record(tg target, a clusterAnswer) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if a.err != nil {
		l.failures = append(l.failures, a.err)
		return
	}
	l.modes[tg][a.mode]++
	if a.allowed {
		l.admitted[tg]++
	}
	if a.mode == "redis" && !l.healthyAt.IsZero() {
		if l.redisAfter[tg].IsZero() {
			l.redisAfter[tg] = time.Now()
		}
		l.deniedAfter[tg] = l.deniedAfter[tg] || !a.allowed
	}
}

// exhausted reports whether every target was denied in Redis since the
// cluster was healthy again: every answer that Redis counted was
// received, so each has then had at least its limit admitted.
func (l *failoverLoad) exhausted(tgs []target) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, tg := range tgs {
		if !l.deniedAfter[tg] {
			return false
		}
	}
	return true
}

// stop ends the run and waits for every client; safe to call twice.
func (l *failoverLoad) stop() {
	l.stopOnce.Do(func() { close(l.stopping) })
	l.wg.Wait()
}

// One primary is killed while three limiters decide keys on every primary.
// Its replica is promoted; every check is answered throughout; keys of the
// surviving primaries stay exact; keys of the killed one fall back to local
// limiting while their slots are unavailable and return to Redis after the
// promotion, admitting at most the documented bound:
//
//	limit + instances × ⌊limit / instances⌋ + writes lost with the primary
//
// The local share is what each limiter admits alone in local mode (the
// limit divided among the live instances); the lost writes are admissions
// the primary acknowledged but had not yet replicated (replication is
// asynchronous). Each client here waits for its answer, so at most one
// write per client (three per key) can be in flight at the kill.
//
// The health checks (every 2s, 3 failed ones switch a limiter to local
// mode) must not all fail while the slot holding the heartbeats is
// unavailable: with a node timeout of 1s the promotion takes 2-3s here.
func TestClusterPrimaryFailover(t *testing.T) {
	const limit, ips, instances = 120, 6, 3
	s := startClusterSystem(t, instances, limit, "REDIS_TIMEOUT", "500ms", "REDIS_HEALTH_INTERVAL", "2s")
	// The local share divides by the live instances each limiter last saw
	// in the heartbeats: wait until all know of all.
	testkit.WaitFor(t, 10*time.Second, "every limiter to count 3 live instances", func() bool {
		for _, lim := range s.limiters {
			if lim.metric(t, "rate_limit_live_instances") != instances {
				return false
			}
		}
		return true
	})
	s.cluster.WaitReplicated(t, 10*time.Second) // replicas linked and acknowledging
	tgs := targets(ips)
	load := startFailoverLoad(s, tgs, 40*time.Millisecond)
	defer load.stop()

	// Kill a primary once every key exists, well before any is exhausted.
	var byPrimary map[target]string
	testkit.WaitFor(t, 10*time.Second, "keys of every target in the cluster", func() bool {
		byPrimary = s.keysByPrimary(t)
		return len(byPrimary) == len(tgs)
	})
	victim := s.cluster.Node(byPrimary[tgs[0]])
	killed := time.Now()
	victim.Kill()
	s.cluster.WaitHealthy(t, 20*time.Second)
	healthy := time.Now()
	load.mu.Lock()
	load.healthyAt = healthy
	load.mu.Unlock()

	var onVictim []target
	for _, tg := range tgs {
		if byPrimary[tg] == victim.Addr {
			onVictim = append(onVictim, tg)
		}
	}
	testkit.WaitFor(t, 20*time.Second, "every key of the killed primary decided in Redis again", func() bool {
		load.mu.Lock()
		defer load.mu.Unlock()
		for _, tg := range onVictim {
			if load.redisAfter[tg].IsZero() {
				return false
			}
		}
		return true
	})
	// Run on until every key is exhausted in Redis, by a condition rather
	// than a time: a slow machine sends fewer checks in any given time.
	testkit.WaitFor(t, time.Minute, "every key denied in Redis after the failover", func() bool { return load.exhausted(tgs) })
	load.stop()
	for _, lim := range s.limiters {
		if m := readyMode(t, lim); m != "redis" {
			t.Errorf("limiter %s in mode %s after the failover, want redis", lim.addr, m)
		}
	}

	if len(load.failures) > 0 {
		t.Fatalf("%d checks failed across the failover, first: %v", len(load.failures), load.failures[0])
	}
	bound := limit + instances*(limit/instances) + instances
	var back time.Duration
	for _, tg := range tgs {
		got, modes := load.admitted[tg], load.modes[tg]
		if byPrimary[tg] != victim.Addr {
			if got != limit || modes["redis"] == 0 || len(modes) != 1 {
				t.Errorf("%s for %s on a surviving primary: %d admitted, modes %v; want exactly %d, all in redis", tg.rule, tg.ip, got, modes, limit)
			}
			continue
		}
		back = max(back, load.redisAfter[tg].Sub(healthy))
		t.Logf("%s for %s on the killed primary: %d admitted (limit %d, bound %d), modes %v", tg.rule, tg.ip, got, limit, bound, modes)
		if got < limit || got > bound {
			t.Errorf("%s for %s on the killed primary: %d admitted, want %d..%d", tg.rule, tg.ip, got, limit, bound)
		}
		if modes["local"] == 0 {
			t.Errorf("%s for %s: no check in local mode while its primary was down: %v", tg.rule, tg.ip, modes)
		}
	}
	if len(onVictim) == 0 {
		t.Fatal("no key on the killed primary")
	}
	t.Logf("%d of %d keys on the killed primary; promoted %v after the kill; all back in Redis %v after that",
		len(onVictim), len(tgs), healthy.Sub(killed).Round(time.Millisecond), back.Round(time.Millisecond))
}
