package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/kafkatest"
	"github.com/ratewarden/ratewarden/internal/testkit/proctest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

const outageRules = `
rules:
  - id: local-rule
    match: {endpoints: ["/local"]}
    key: [ip]
    algorithm: token_bucket
    # A bucket that barely refills: over an outage of seconds the local
    # limit is exactly its burst.
    limits: [{rate: 100, per: 1h, burst: 100}]
    on_redis_failure: local
  - id: allow-rule
    match: {endpoints: ["/allow"]}
    key: [ip]
    algorithm: fixed_window
    limits: [{requests: 1000000, per: 1m}]
    on_redis_failure: allow
  - id: deny-rule
    match: {endpoints: ["/deny"]}
    key: [ip]
    algorithm: fixed_window
    limits: [{requests: 1000000, per: 1m}]
    on_redis_failure: deny
`

// outageTally counts the answers of the load, by rule.
type outageTally struct {
	mu          sync.Mutex
	failed      []string // transport errors and timeouts
	serverError map[string]int
	status      map[string]map[int]int
	localMode   struct{ admitted, denied int } // hot key, decided in memory
	modes       map[string]int
	slowest     time.Duration
}

func TestRedisKilledUnderLoad(t *testing.T) {
	dir := t.TempDir()
	rulesPath := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rulesPath, []byte(outageRules), 0o600); err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(proctest.FreeAddr(t))
	rds := redistest.StartServerAt(t, "127.0.0.1:"+port)
	broker := kafkatest.StartBroker(t, decisionsTopic, bansTopic, outcomesTopic)
	lim := start(t, "limiter", map[string]string{
		"REDIS_URL":              "redis://127.0.0.1:" + port + "/0",
		"REDIS_KEY_PREFIX":       "rwtest:outage:",
		"KAFKA_BROKERS":          broker.Addr(),
		"RULES_FILE":             rulesPath,
		"INSTANCE_ID":            "outage-1",
		"REDIS_HEALTH_INTERVAL":  "200ms",
		"REDIS_FAILED_CHECKS":    "3",
		"REDIS_RECOVER_AFTER":    "1s",
		"PERMISSIVE_AFTER":       "0",
		"REDIS_BREAKER_FAILURES": "5",
		"DYNAMIC_RULES":          "false", // the rules file alone: no database
	})
	testkit.WaitFor(t, 5*time.Second, "mode redis", func() bool { return readyMode(t, lim) == "redis" })

	tally := &outageTally{serverError: map[string]int{}, status: map[string]map[int]int{}, modes: map[string]int{}}
	ctx, stop := context.WithCancel(context.Background())
	var clients sync.WaitGroup
	var sent atomic.Int64
	httpc := &http.Client{Timeout: time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer httpc.CloseIdleConnections()
	for i := range 50 {
		endpoint, ip := "/local", "198.51.100.7" // 30 clients share one hot key
		switch {
		case i >= 40:
			endpoint, ip = "/deny", fmt.Sprintf("198.51.100.%d", 100+i)
		case i >= 30:
			endpoint, ip = "/allow", fmt.Sprintf("198.51.100.%d", 100+i)
		}
		clients.Go(func() {
			for ctx.Err() == nil {
				tally.record(httpc, lim.addr, endpoint, ip)
				sent.Add(1)
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
	defer func() { stop(); clients.Wait() }()

	time.Sleep(500 * time.Millisecond)
	killed := time.Now()
	rds.Kill()
	testkit.WaitFor(t, 5*time.Second, "/readyz mode local", func() bool { return readyMode(t, lim) == "local" })
	t.Logf("mode local %v after the kill", time.Since(killed).Round(time.Millisecond))
	if g := modeGauge(t, lim); g["local"] != 1 || g["redis"] != 0 || g["permissive"] != 0 {
		t.Fatalf("rate_limit_mode during the outage: %v", g)
	}
	time.Sleep(2 * time.Second) // the outage, under load

	restarted := time.Now()
	redistest.StartServerAt(t, "127.0.0.1:"+port)
	testkit.WaitFor(t, 5*time.Second, "/readyz mode redis", func() bool { return readyMode(t, lim) == "redis" })
	t.Logf("mode redis %v after the restart", time.Since(restarted).Round(time.Millisecond))
	if g := modeGauge(t, lim); g["redis"] != 1 || g["local"] != 0 {
		t.Fatalf("rate_limit_mode after recovery: %v", g)
	}
	time.Sleep(300 * time.Millisecond)
	stop()
	clients.Wait()

	tally.mu.Lock()
	defer tally.mu.Unlock()
	t.Logf("%d requests; statuses %v; modes %v; hot key in local mode: %d admitted, %d denied; slowest answer %v",
		sent.Load(), tally.status, tally.modes, tally.localMode.admitted, tally.localMode.denied, tally.slowest)
	if len(tally.failed) > 0 {
		t.Errorf("%d requests got no answer within 1s, e.g. %s", len(tally.failed), tally.failed[0])
	}
	for _, ep := range []string{"/local", "/allow"} {
		if n := tally.serverError[ep]; n > 0 {
			t.Errorf("%s: %d answers 5xx; its failure policy must answer", ep, n)
		}
	}
	if tally.status["/deny"][http.StatusServiceUnavailable] == 0 {
		t.Errorf("the deny rule never answered 503 during the outage")
	}
	if tally.localMode.admitted > 100 {
		t.Errorf("hot key admitted %d times in local mode, local limit is 100", tally.localMode.admitted)
	}
	if tally.localMode.denied == 0 {
		t.Errorf("the local limit never denied the hot key: it was not enforced")
	}
	if tally.modes["redis"] == 0 || tally.modes["local"] == 0 {
		t.Errorf("want decisions in both modes, got %v", tally.modes)
	}
}

func (o *outageTally) record(httpc *http.Client, addr, endpoint, ip string) {
	began := time.Now()
	resp, err := httpc.Post("http://"+addr+"/v1/check", "application/json",
		strings.NewReader(fmt.Sprintf(`{"ip":%q,"endpoint":%q}`, ip, endpoint)))
	var body struct {
		Allowed bool   `json:"allowed"`
		Mode    string `json:"mode"`
	}
	if err == nil {
		err = json.NewDecoder(resp.Body).Decode(&body)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	took := time.Since(began)
	o.mu.Lock()
	defer o.mu.Unlock()
	o.slowest = max(o.slowest, took)
	if err != nil {
		o.failed = append(o.failed, fmt.Sprintf("%s after %v: %v", endpoint, took, err))
		return
	}
	if o.status[endpoint] == nil {
		o.status[endpoint] = map[int]int{}
	}
	o.status[endpoint][resp.StatusCode]++
	if resp.StatusCode >= 500 {
		o.serverError[endpoint]++
		return
	}
	o.modes[body.Mode]++
	if endpoint == "/local" && body.Mode == "local" {
		if body.Allowed {
			o.localMode.admitted++
		} else {
			o.localMode.denied++
		}
	}
}

func readyMode(t *testing.T, p *proc) string {
	t.Helper()
	resp, err := http.Get("http://" + p.addr + "/readyz")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var body struct {
		Mode string `json:"mode"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return body.Mode
}

// modeGauge reads rate_limit_mode{mode} from /metrics.
func modeGauge(t *testing.T, p *proc) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + p.addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var mode string
		var v float64
		if _, err := fmt.Sscanf(sc.Text(), "rate_limit_mode{mode=%q} %g", &mode, &v); err == nil {
			out[mode] = v
		}
	}
	return out
}
