package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/testkit/kafkatest"
	"github.com/ratewarden/ratewarden/internal/testkit/proctest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// The scenario of a cold start: three limiters started together on a Redis
// nobody has used yet, a fixed window of 100 per minute on one IP, and 50
// clients per limiter sending 150 checks each the moment its /healthz
// answers.
const (
	coldLimiters = 3
	coldClients  = 50
	coldChecks   = 150
	coldLimit    = 100
	coldRounds   = 5
	coldIP       = "198.51.100.77"
	coldRules    = `
rules:
  - {id: cold, match: {endpoints: ["/cold"]}, key: [ip], algorithm: fixed_window, limits: [{requests: 100, per: 1m}]}
`
)

// coldAnswer is what one check of the scenario got.
type coldAnswer struct {
	status  int
	allowed bool
	mode    string
	window  int64 // the fixed window that decided it: its end, in minutes since the epoch
	err     error
}

// Cold limiters on a fresh 6-node Redis Cluster admit exactly the limit,
// every decision in Redis, round after round.
func TestColdStartOnClusterIsExact(t *testing.T) {
	broker := kafkatest.StartBroker(t, decisionsTopic, bansTopic, outcomesTopic)
	rules := writeColdRules(t)
	for round := range coldRounds {
		t.Run(fmt.Sprintf("round %d", round+1), func(t *testing.T) {
			cluster := redistest.StartCluster(t, 3, 1)
			runColdStart(t, map[string]string{
				"REDIS_URL":           "redis://127.0.0.1:1/0", // nowhere: only the cluster decides
				"REDIS_CLUSTER_ADDRS": strings.Join(cluster.Addrs(), ","),
				"REDIS_KEY_PREFIX":    redistest.Prefix(t, cluster.Client(t)),
				"KAFKA_BROKERS":       broker.Addr(),
				"RULES_FILE":          rules,
				"DYNAMIC_RULES":       "false",
			})
		})
	}
}

// The same on a single Redis, a private server started for each round so
// that it has no script and no connection yet.
func TestColdStartOnSingleRedisIsExact(t *testing.T) {
	broker := kafkatest.StartBroker(t, decisionsTopic, bansTopic, outcomesTopic)
	rules := writeColdRules(t)
	for round := range coldRounds {
		t.Run(fmt.Sprintf("round %d", round+1), func(t *testing.T) {
			server := startRedisServer(t)
			runColdStart(t, map[string]string{
				"REDIS_URL":        "redis://" + server.Addr + "/0",
				"REDIS_KEY_PREFIX": redistest.Prefix(t, clientOf(t, server)),
				"KAFKA_BROKERS":    broker.Addr(),
				"RULES_FILE":       rules,
				"DYNAMIC_RULES":    "false",
			})
		})
	}
}

func writeColdRules(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cold-rules.yaml")
	if err := os.WriteFile(path, []byte(coldRules), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// runColdStart launches the limiters together with env, loads each the
// moment its /healthz answers, and checks that exactly the limit was
// admitted, every answer decided in Redis.
func runColdStart(t *testing.T, env map[string]string) {
	t.Helper()
	var limiters []*proc
	for i := range coldLimiters {
		// REDIS_TIMEOUT is generous: a round trip past the default 50 ms on
		// a loaded machine would send its check to local mode, a failure of
		// the machine's speed, not of the warm-up, which the test checks by
		// rate_limit_warmup_complete and by exactness.
		vars := map[string]string{"INSTANCE_ID": fmt.Sprintf("cold-%d", i+1), "REDIS_TIMEOUT": "1s"}
		for k, v := range env {
			vars[k] = v
		}
		limiters = append(limiters, launch(t, "limiter", vars))
	}
	began := time.Now()
	answers, err := loadWhenHealthy(limiters)
	took := time.Since(began)
	if err != nil {
		t.Fatal(err)
	}

	modes := map[string]int{}
	answered, admitted := map[int64]int{}, map[int64]int{}
	var failed []coldAnswer
	for _, a := range answers {
		if a.err != nil || a.status != http.StatusOK {
			failed = append(failed, a)
			continue
		}
		modes[a.mode]++
		answered[a.window]++
		if a.allowed {
			admitted[a.window]++
		}
	}
	var redisErrors float64
	for _, l := range limiters {
		redisErrors += l.metric(t, "rate_limit_redis_errors_total")
		if l.metric(t, "rate_limit_warmup_complete") != 1 {
			t.Errorf("%s started without completing its warm-up", l.addr)
		}
	}
	t.Logf("%d checks in %v: admitted %v of %v by window (minute); modes %v; redis errors %v",
		len(answers), took.Round(time.Millisecond), admitted, answered, modes, redisErrors)
	if len(failed) > 0 {
		t.Fatalf("%d checks failed, first: status %d, %v", len(failed), failed[0].status, failed[0].err)
	}
	if modes["redis"] != len(answers) {
		t.Errorf("modes %v: every check must be decided in Redis", modes)
	}
	// The window is aligned to the minute: a round that crosses a minute
	// boundary meets two windows, each of which must admit exactly the
	// limit, or every check when it got fewer.
	for w, n := range answered {
		if want := min(n, coldLimit); admitted[w] != want {
			t.Errorf("window ending at minute %d: %d admitted of %d checks, want exactly %d", w, admitted[w], n, want)
		}
	}
}

// loadWhenHealthy starts, for each limiter, coldClients clients sending
// coldChecks checks each as soon as its /healthz answers, and returns every
// answer.
func loadWhenHealthy(limiters []*proc) ([]coldAnswer, error) {
	httpc := &http.Client{Timeout: 10 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: coldClients, MaxIdleConns: coldLimiters * coldClients}}
	defer httpc.CloseIdleConnections()
	var (
		mu      sync.Mutex
		answers []coldAnswer
		errs    []error
		wg      sync.WaitGroup
	)
	for _, l := range limiters {
		wg.Go(func() {
			if err := l.await("/healthz", 30*time.Second); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return
			}
			var clients sync.WaitGroup
			for range coldClients {
				clients.Go(func() {
					mine := make([]coldAnswer, 0, coldChecks)
					for range coldChecks {
						mine = append(mine, coldCheck(httpc, l))
					}
					mu.Lock()
					answers = append(answers, mine...)
					mu.Unlock()
				})
			}
			clients.Wait()
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return nil, errs[0]
	}
	return answers, nil
}

// coldCheck sends one check of the scenario. The window deciding it is
// read from reset_after_ms: its end is a multiple of the minute, and lies
// within the round trip of sent + reset_after, so rounding to the nearest
// minute finds it.
func coldCheck(httpc *http.Client, l *proc) coldAnswer {
	sent := time.Now()
	resp, err := httpc.Post("http://"+l.addr+"/v1/check", "application/json",
		strings.NewReader(`{"ip":"`+coldIP+`","endpoint":"/cold"}`))
	if err != nil {
		return coldAnswer{err: err}
	}
	defer resp.Body.Close()
	var body struct {
		Allowed      bool   `json:"allowed"`
		Mode         string `json:"mode"`
		ResetAfterMS int64  `json:"reset_after_ms"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return coldAnswer{status: resp.StatusCode, err: err}
	}
	end := sent.Add(time.Duration(body.ResetAfterMS) * time.Millisecond)
	return coldAnswer{status: resp.StatusCode, allowed: body.Allowed, mode: body.Mode,
		window: end.Add(30*time.Second).Unix() / 60}
}

// A Redis that does not answer at start: the limiter waits for it no longer
// than REDIS_WARMUP_TIMEOUT, says so, and then decides by the rule's
// failure policy (local) until Redis answers.
func TestStartWithRedisUnreachable(t *testing.T) {
	broker := kafkatest.StartBroker(t, decisionsTopic, bansTopic, outcomesTopic)
	rules := writeColdRules(t)
	for _, tc := range []struct {
		name  string
		redis func(t *testing.T) string // the address
		class []string                  // of the error logged
	}{
		// Timeout: when the deadline cuts the first attempt short.
		{"connection refused", func(t *testing.T) string { return proctest.FreeAddr(t) }, []string{"connection", "timeout"}},
		{"server hung", func(t *testing.T) string {
			s := startRedisServer(t)
			s.Hang()
			return s.Addr
		}, []string{"timeout"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := "redis://" + tc.redis(t) + "/0"
			lim := launch(t, "limiter", map[string]string{
				"REDIS_URL":            url,
				"REDIS_WARMUP_TIMEOUT": "1s",
				"REDIS_KEY_PREFIX":     "rwtest:unreachable:",
				"KAFKA_BROKERS":        broker.Addr(),
				"RULES_FILE":           rules,
				"DYNAMIC_RULES":        "false",
				"INSTANCE_ID":          "unreachable",
			})
			if err := lim.await("/healthz", 15*time.Second); err != nil {
				t.Fatal(err)
			}
			for range 3 {
				if d := check(t, lim, coldIP, "/cold"); d.Status != http.StatusOK || !d.Allowed || d.Mode != "local" {
					t.Fatalf("check: %+v, want allowed in local mode", d)
				}
			}
			warning := ""
			for line := range strings.SplitSeq(lim.out.String(), "\n") {
				if strings.Contains(line, `"msg":"warm-up incomplete`) {
					warning = line
				}
			}
			classOK := false
			for _, c := range tc.class {
				classOK = classOK || strings.Contains(warning, `"class":"`+c+`"`)
			}
			if !classOK || !strings.Contains(warning, `"step":"redis"`) || !strings.Contains(warning, `"redis":"`+url+`"`) {
				t.Errorf("warning %q: want the step, the Redis and the error class (one of %q)", warning, tc.class)
			}
			if got := lim.metric(t, "rate_limit_warmup_complete"); got != 0 {
				t.Errorf("rate_limit_warmup_complete %v, want 0", got)
			}
		})
	}
}
