package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// clusterRules limits each of four endpoints with one algorithm, per client
// IP. Windows of a day keep a test inside one window, started away from its
// end.
const clusterRules = `
rules:
  - {id: fw, match: {endpoints: ["/fw"]}, key: [ip], algorithm: fixed_window, limits: [{requests: %[1]d, per: 24h}]}
  - {id: sw, match: {endpoints: ["/sw"]}, key: [ip], algorithm: sliding_window, limits: [{requests: %[1]d, per: 1h}]}
  - {id: swc, match: {endpoints: ["/swc"]}, key: [ip], algorithm: sliding_window_counter, limits: [{requests: %[1]d, per: 24h}]}
  - {id: tb, match: {endpoints: ["/tb"]}, key: [ip], algorithm: token_bucket, limits: [{rate: 1, per: 1h, burst: %[1]d}]}
`

var clusterRuleIDs = []string{"fw", "sw", "swc", "tb"}

// clusterSystem is a 3-primary, 3-replica Redis Cluster and limiters using
// it with the rules above.
type clusterSystem struct {
	cluster  *redistest.Cluster
	prefix   string
	limiters []*proc
}

// startClusterSystem builds the cluster and starts n limiters on it, with
// REDIS_URL pointing nowhere so that only the cluster can decide.
func startClusterSystem(t *testing.T, n int, limit int64, extra ...string) *clusterSystem {
	t.Helper()
	testkit.AvoidWindowEnd(t, 24*time.Hour, time.Minute)
	s := &clusterSystem{cluster: redistest.StartCluster(t, 3, 1)}
	e := newEnv(t)
	rules := filepath.Join(t.TempDir(), "cluster-rules.yaml")
	if err := os.WriteFile(rules, []byte(fmt.Sprintf(clusterRules, limit)), 0o600); err != nil {
		t.Fatal(err)
	}
	s.prefix = redistest.Prefix(t, s.cluster.Client(t))
	vars := append([]string{
		"REDIS_URL", "redis://127.0.0.1:1/0",
		"REDIS_CLUSTER_ADDRS", strings.Join(s.cluster.Addrs(), ","),
		"REDIS_KEY_PREFIX", s.prefix,
		"RULES_FILE", rules,
		"DYNAMIC_RULES", "false",
	}, extra...)
	for i := range n {
		s.limiters = append(s.limiters, e.start("limiter", append(vars, "INSTANCE_ID", fmt.Sprintf("limiter-%d", i+1))...))
	}
	return s
}

// target is one rate-limited key: a rule and a client IP.
type target struct{ rule, ip string }

// keysByPrimary maps every target with a key in the cluster to the address
// of the primary holding it, read from the primaries' own keys.
func (s *clusterSystem) keysByPrimary(t *testing.T) map[target]string {
	t.Helper()
	out := map[target]string{}
	for _, p := range s.cluster.Primaries() {
		keys, err := p.Client().Keys(context.Background(), s.prefix+"{*").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			// <prefix>{<rule>|ip=<ip>}<suffix>
			tag := k[strings.IndexByte(k, '{')+1 : strings.IndexByte(k, '}')]
			rule, subject, ok := strings.Cut(tag, "|ip=")
			if ok {
				out[target{rule, subject}] = p.Addr
			}
		}
	}
	return out
}

// clusterAnswer is what one check got.
type clusterAnswer struct {
	allowed bool
	mode    string
	err     error
}

func clusterCheck(httpc *http.Client, limiter *proc, tg target) clusterAnswer {
	resp, err := httpc.Post("http://"+limiter.addr+"/v1/check", "application/json",
		strings.NewReader(fmt.Sprintf(`{"ip":%q,"endpoint":"/%s"}`, tg.ip, tg.rule)))
	if err != nil {
		return clusterAnswer{err: err}
	}
	defer resp.Body.Close()
	var body struct {
		Allowed bool   `json:"allowed"`
		Mode    string `json:"mode"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return clusterAnswer{err: fmt.Errorf("status %d: %w", resp.StatusCode, err)}
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusTooManyRequests {
		return clusterAnswer{err: fmt.Errorf("status %d", resp.StatusCode)}
	}
	return clusterAnswer{allowed: body.Allowed, mode: body.Mode}
}

func targets(ips int) []target {
	var out []target
	for _, rule := range clusterRuleIDs {
		for i := range ips {
			out = append(out, target{rule, fmt.Sprintf("198.51.100.%d", i+1)})
		}
	}
	return out
}

// Three limiters share a 6-node cluster: every algorithm admits exactly its
// limit per key, keys spread over all three primaries, while 48 clients
// race on the keys through all three limiters.
func TestClusterExactAcrossLimiters(t *testing.T) {
	const limit, ips = 20, 12
	s := startClusterSystem(t, 3, limit, "REDIS_TIMEOUT", "2s") // a slow CI machine must not look like a failure
	jobs := make(chan target)
	var mu sync.Mutex
	admitted, modes := map[target]int{}, map[string]int{}
	var failures []error
	httpc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	var wg sync.WaitGroup
	for w := range 48 {
		wg.Go(func() {
			for tg := range jobs {
				a := clusterCheck(httpc, s.limiters[w%len(s.limiters)], tg)
				mu.Lock()
				if a.err != nil {
					failures = append(failures, a.err)
				} else {
					modes[a.mode]++
					if a.allowed {
						admitted[tg]++
					}
				}
				mu.Unlock()
			}
		})
	}
	var all []target
	for _, tg := range targets(ips) {
		for range 3 * limit {
			all = append(all, tg)
		}
	}
	rand.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	for _, tg := range all {
		jobs <- tg
	}
	close(jobs)
	wg.Wait()

	if len(failures) > 0 {
		t.Fatalf("%d of %d checks failed, first: %v", len(failures), len(all), failures[0])
	}
	for _, tg := range targets(ips) {
		if admitted[tg] != limit {
			t.Errorf("%s for %s: %d admitted across 3 limiters, want exactly %d", tg.rule, tg.ip, admitted[tg], limit)
		}
	}
	if modes["redis"] != len(all) {
		t.Errorf("modes %v: every check must be decided in the cluster", modes)
	}
	perPrimary := map[string]int{}
	for _, addr := range s.keysByPrimary(t) {
		perPrimary[addr]++
	}
	if len(perPrimary) != 3 {
		t.Errorf("keys on %d primaries (%v), want all 3", len(perPrimary), perPrimary)
	}
	t.Logf("%d checks, %d keys; keys per primary %v", len(all), len(targets(ips)), perPrimary)
}

// On a cluster, what the limiters share outside the decision scripts still
// reaches all of them: heartbeats (each counts three live instances), a ban
// made through one limiter's admin API (pub/sub on the blacklist's slot)
// and a rule changed through another's (the rule-change announcement; the
// poll is an hour here, so only the announcement can deliver it in time).
func TestClusterBansRulesAndHeartbeats(t *testing.T) {
	s := startClusterSystem(t, 3, 20, "DYNAMIC_RULES", "true", "RULES_POLL_INTERVAL", "1h", "REDIS_HEALTH_INTERVAL", "200ms")
	lims := s.limiters
	testkit.WaitFor(t, 5*time.Second, "every limiter to count 3 live instances", func() bool {
		for _, l := range lims {
			if l.metric(t, "rate_limit_live_instances") != 3 {
				return false
			}
		}
		return true
	})

	const banned = "203.0.113.9"
	if code, body := admin(t, lims[0], http.MethodPost, "/v1/admin/bans", adminToken,
		`{"scope":"ip","subject":"`+banned+`","duration":"1h","reason":"cluster test"}`); code != http.StatusCreated {
		t.Fatalf("ban: %d %s", code, body)
	}
	for _, l := range lims[1:] {
		testkit.WaitFor(t, time.Second, "the ban on "+l.addr, func() bool { return check(t, l, banned, "/fw").Reason == "banned" })
	}

	const fwAt2 = `{"id": "fw", "match": {"endpoints": ["/fw"]}, "key": ["ip"],
		"algorithm": "fixed_window", "limits": [{"requests": 2, "per": "24h"}]}`
	if code, body := admin(t, lims[1], http.MethodPut, "/v1/admin/rules/fw", adminToken, fwAt2); code != http.StatusCreated {
		t.Fatalf("PUT rule: %d %s", code, body)
	}
	for i, l := range lims {
		testkit.WaitFor(t, time.Second, "the lowered limit on "+l.addr, func() bool {
			return check(t, l, fmt.Sprintf("203.0.113.%d", 100+i), "/fw").Limit == 2
		})
	}
	allowed := 0
	for _, l := range []*proc{lims[0], lims[1], lims[2], lims[0]} {
		if check(t, l, "203.0.113.200", "/fw").Allowed {
			allowed++
		}
	}
	if allowed != 2 {
		t.Fatalf("%d of 4 requests allowed across the limiters under the new limit of 2", allowed)
	}
	testkit.WaitFor(t, 5*time.Second, "every instance to report the same rules", func() bool {
		_, body := admin(t, lims[2], http.MethodGet, "/v1/admin/rules", adminToken, "")
		return strings.Count(body, `"in_sync":true`) == 3
	})
}
