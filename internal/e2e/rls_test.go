package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/eventschema"
	"github.com/ratewarden/ratewarden/internal/testkit/kafkatest"
	"github.com/ratewarden/ratewarden/internal/testkit/proctest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// rlsDir writes files (name → envoyproxy/ratelimit YAML) into a new
// directory for RLS_CONFIG_DIR.
func rlsDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// rlsClient dials the limiter's gRPC listener as Envoy does: one HTTP/2
// connection for every call.
func rlsClient(t *testing.T, p *proc) rlsv3.RateLimitServiceClient {
	t.Helper()
	if p.grpcAddr == "" {
		t.Fatalf("%s has no gRPC listener", p.name)
	}
	conn, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

// rlsRequest is a request of domain with one descriptor per entry list,
// each entry list written "key=value,key=value".
func rlsRequest(domain string, descriptors ...string) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: domain}
	for _, d := range descriptors {
		desc := &rlcommon.RateLimitDescriptor{}
		for _, kv := range strings.Split(d, ",") {
			k, v, _ := strings.Cut(kv, "=")
			desc.Entries = append(desc.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: k, Value: v})
		}
		req.Descriptors = append(req.Descriptors, desc)
	}
	return req
}

// rlsAlgorithms are the RLS config files of the exact-count test: one
// domain per algorithm, 100 admitted per client address.
var rlsAlgorithms = map[string]string{
	"fixed_window":           "rate_limit: {unit: hour, requests_per_unit: 100}",
	"sliding_window":         "rate_limit: {unit: hour, requests_per_unit: 100, algorithm: sliding_window}",
	"sliding_window_counter": "rate_limit: {unit: hour, requests_per_unit: 100, algorithm: sliding_window_counter}",
	"token_bucket":           "rate_limit: {unit: hour, requests_per_unit: 1, burst: 100, algorithm: token_bucket}",
}

// Two limiters, 200 concurrent gRPC clients on one address: exactly 100
// admitted, for every algorithm. A fixed window that ends during a round
// would admit a second 100: such a round is run again (the windows are an
// hour long, so at most once).
func TestRLSExactCountsAcrossTwoLimiters(t *testing.T) {
	files := map[string]string{}
	for alg, limit := range rlsAlgorithms {
		files[alg+".yaml"] = fmt.Sprintf("domain: exact-%s\ndescriptors:\n  - key: remote_address\n    %s\n", alg, limit)
	}
	e := newEnv(t)
	dir := rlsDir(t, files)
	limiters := []*proc{e.start("limiter", "RLS_CONFIG_DIR", dir), e.start("limiter", "RLS_CONFIG_DIR", dir)}
	clients := []rlsv3.RateLimitServiceClient{rlsClient(t, limiters[0]), rlsClient(t, limiters[1])}
	round := 0
	for alg := range rlsAlgorithms {
		t.Run(alg, func(t *testing.T) {
			for attempt := 0; ; attempt++ {
				round++
				addr := fmt.Sprintf("198.51.100.%d", round)
				hour := time.Now().Truncate(time.Hour)
				ok, over := rlsFlood(t, clients, rlsRequest("exact-"+alg, "remote_address="+addr), 200, 3)
				if hour != time.Now().Truncate(time.Hour) && attempt == 0 {
					t.Logf("an hour ended during the round (%d admitted): again", ok)
					continue
				}
				if ok != 100 || over != 500 {
					t.Fatalf("%d OK and %d OVER_LIMIT of 600 calls; want exactly 100 OK", ok, over)
				}
				return
			}
		})
	}
}

// rlsFlood sends req from n goroutines, each calls times, spread over the
// clients, and counts the overall codes; any error fails the test.
func rlsFlood(t *testing.T, clients []rlsv3.RateLimitServiceClient, req *rlsv3.RateLimitRequest, n, calls int) (ok, over int) {
	t.Helper()
	var okN, overN atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, n*calls)
	for i := range n {
		c := clients[i%len(clients)]
		wg.Go(func() {
			for range calls {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				resp, err := c.ShouldRateLimit(ctx, req)
				cancel()
				switch {
				case err != nil:
					errs <- err
				case resp.OverallCode == rlsv3.RateLimitResponse_OK:
					okN.Add(1)
				case resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT:
					overN.Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err, failed := <-errs; failed {
		t.Fatalf("%d calls failed, e.g. %v", len(errs)+1, err)
	}
	return int(okN.Load()), int(overN.Load())
}

// A ban of an address (admin API, as the detector's) answers OVER_LIMIT for
// every descriptor of a request from it, matched or not; other addresses
// are unaffected. Every call is an event on the decisions topic with its
// domain and descriptors.
func TestRLSBanAndEvents(t *testing.T) {
	e := newEnv(t)
	dir := rlsDir(t, map[string]string{"edge.yaml": `
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 1000}
  - key: ldap
    rate_limit: {unlimited: true}
`})
	lim := e.start("limiter", "RLS_CONFIG_DIR", dir)
	client := rlsClient(t, lim)
	const banned, other = "203.0.113.50", "203.0.113.51"
	if status, body := admin(t, lim, "POST", "/v1/admin/bans", adminToken,
		fmt.Sprintf(`{"scope":"ip","subject":%q,"duration":"1h","reason":"manual"}`, banned)); status != 201 && status != 200 {
		t.Fatalf("ban: %d %s", status, body)
	}
	ctx := context.Background()
	testkit.WaitFor(t, 5*time.Second, "the ban to reach the gRPC answers", func() bool {
		resp, err := client.ShouldRateLimit(ctx, rlsRequest("edge", "remote_address="+banned, "ldap=x", "unknown=y"))
		if err != nil {
			t.Fatal(err)
		}
		if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
			return false
		}
		for i, s := range resp.Statuses {
			if s.Code != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("banned address: status %d is %v, want OVER_LIMIT for every descriptor", i, s.Code)
			}
		}
		return true
	})
	resp, err := client.ShouldRateLimit(ctx, rlsRequest("edge", "remote_address="+other, "ldap=x"))
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("another address: %v %v", resp, err)
	}

	// The decision of the other address, on the topic.
	deadline := time.Now().Add(10 * time.Second)
	for {
		ev, ok := findDecision(t, e.broker, func(d event.Decision) bool { return d.IP == other && d.Domain == "edge" })
		if ok {
			if len(ev.Descriptors) != 2 || ev.Descriptors[0].Code != event.CodeOK || ev.Descriptors[1].Entries[0].Key != "ldap" {
				t.Fatalf("event descriptors %+v", ev.Descriptors)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no decision event of the rate limit call")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// findDecision reads the decisions topic from the start and returns the
// first event f accepts; every event must pass the published schema.
func findDecision(t *testing.T, broker *kafkatest.Broker, f func(event.Decision) bool) (event.Decision, bool) {
	t.Helper()
	schema, err := eventschema.Compile("../../deploy/schemas/decision.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	n := int(kafkatest.CountMessages(t, broker.Brokers(), decisionsTopic))
	for _, m := range kafkatest.ReadMessages(t, broker.Brokers(), decisionsTopic, n, 10*time.Second) {
		if err := schema.Validate(m.Value); err != nil {
			t.Fatalf("a decision event fails the schema: %v\n%s", err, m.Value)
		}
		d, err := event.DecodeDecision(m.Value)
		if err != nil {
			t.Fatalf("an undecodable decision event: %v", err)
		}
		if f(d) {
			return d, true
		}
	}
	return event.Decision{}, false
}

// Redis killed under gRPC load: each descriptor answers by its rule's
// on_redis_failure (local: limited in memory; allow: OK; deny: the call
// fails with UNAVAILABLE, which Envoy's failure_mode_deny turns into a
// denial or an admission), and nothing else fails.
func TestRLSRedisKilledUnderLoad(t *testing.T) {
	dir := rlsDir(t, map[string]string{"outage.yaml": `
domain: outage
descriptors:
  - key: local
    rate_limit: {unit: hour, requests_per_unit: 100, algorithm: token_bucket, burst: 100, on_redis_failure: local}
  - key: allow
    rate_limit: {unit: minute, requests_per_unit: 1000000, on_redis_failure: allow}
  - key: deny
    rate_limit: {unit: minute, requests_per_unit: 1000000, on_redis_failure: deny}
`})
	_, port, _ := net.SplitHostPort(proctest.FreeAddr(t))
	rds := redistest.StartServerAt(t, "127.0.0.1:"+port)
	broker := kafkatest.StartBroker(t, decisionsTopic, bansTopic, outcomesTopic)
	lim := start(t, "limiter", map[string]string{
		"REDIS_URL":              "redis://127.0.0.1:" + port + "/0",
		"REDIS_KEY_PREFIX":       "rwtest:rlsoutage:",
		"KAFKA_BROKERS":          broker.Addr(),
		"RULES_FILE":             writeRules(t, "rules: []\n"),
		"RLS_CONFIG_DIR":         dir,
		"REDIS_HEALTH_INTERVAL":  "200ms",
		"REDIS_FAILED_CHECKS":    "3",
		"REDIS_RECOVER_AFTER":    "1s",
		"PERMISSIVE_AFTER":       "0",
		"REDIS_BREAKER_FAILURES": "5",
		"DYNAMIC_RULES":          "false",
	})
	testkit.WaitFor(t, 5*time.Second, "mode redis", func() bool { return readyMode(t, lim) == "redis" })
	client := rlsClient(t, lim)

	type tally struct{ ok, over, unavailable, other int }
	var mu sync.Mutex
	counts := map[string]*tally{"local": {}, "allow": {}, "deny": {}}
	var localDuringOutage tally
	var outage atomic.Bool
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range 48 {
		key := []string{"local", "allow", "deny"}[i%3]
		wg.Go(func() {
			for ctx.Err() == nil {
				cctx, cancel := context.WithTimeout(context.Background(), time.Second)
				resp, err := client.ShouldRateLimit(cctx, rlsRequest("outage", key+"=hot"))
				cancel()
				mu.Lock()
				c := counts[key]
				switch {
				case status.Code(err) == codes.Unavailable:
					c.unavailable++
				case err != nil:
					c.other++
				case resp.OverallCode == rlsv3.RateLimitResponse_OK:
					c.ok++
					if key == "local" && outage.Load() {
						localDuringOutage.ok++
					}
				default:
					c.over++
					if key == "local" && outage.Load() {
						localDuringOutage.over++
					}
				}
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
	defer func() { stop(); wg.Wait() }()

	time.Sleep(500 * time.Millisecond)
	rds.Kill()
	testkit.WaitFor(t, 5*time.Second, "/readyz mode local", func() bool { return readyMode(t, lim) == "local" })
	outage.Store(true)
	time.Sleep(2 * time.Second)
	outage.Store(false)
	redistest.StartServerAt(t, "127.0.0.1:"+port)
	testkit.WaitFor(t, 5*time.Second, "/readyz mode redis", func() bool { return readyMode(t, lim) == "redis" })
	stop()
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	for k, c := range counts {
		t.Logf("%s: %+v", k, *c)
		if c.other > 0 {
			t.Errorf("%s: %d calls failed other than UNAVAILABLE", k, c.other)
		}
	}
	t.Logf("local during the outage: %+v", localDuringOutage)
	if counts["allow"].unavailable+counts["allow"].over+counts["local"].unavailable > 0 {
		t.Errorf("allow and local rules must answer during the outage: %+v %+v", *counts["allow"], *counts["local"])
	}
	if counts["deny"].unavailable == 0 {
		t.Errorf("the deny rule never answered UNAVAILABLE during the outage")
	}
	if localDuringOutage.ok > 100 || localDuringOutage.over == 0 {
		t.Errorf("local mode admitted %d and denied %d of the hot key; want the local limit of 100 enforced", localDuringOutage.ok, localDuringOutage.over)
	}
}

// writeRules writes a rules file and returns its path.
func writeRules(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// A descriptor rule put through the admin API (stored in Postgres, the
// store of the rules file's dynamic rules) applies to gRPC calls on every
// limiter, beside the RLS config files.
func TestRLSDynamicDescriptorRule(t *testing.T) {
	e := newEnv(t)
	dir := rlsDir(t, map[string]string{"edge.yaml": "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: 1000}\n"})
	a, b := e.start("limiter", "RLS_CONFIG_DIR", dir), e.start("limiter", "RLS_CONFIG_DIR", dir)
	rule := `{"id":"api-key","descriptor":{"domain":"edge","entries":[{"key":"api_key"}]},
	          "algorithm":"sliding_window","limits":[{"requests":2,"per":"1h"}]}`
	if status, body := admin(t, a, "PUT", "/v1/admin/rules/api-key", adminToken, rule); status != 200 && status != 201 {
		t.Fatalf("PUT: %d %s", status, body)
	}
	client := rlsClient(t, b)
	testkit.WaitFor(t, 5*time.Second, "the dynamic rule on the other limiter", func() bool {
		resp, err := client.ShouldRateLimit(context.Background(), rlsRequest("edge", "api_key=k-"+e.vars["REDIS_KEY_PREFIX"]))
		return err == nil && resp.Statuses[0].CurrentLimit != nil
	})
	req := rlsRequest("edge", "api_key=k-2-"+e.vars["REDIS_KEY_PREFIX"])
	var codes []string
	for range 3 {
		resp, err := client.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		codes = append(codes, resp.OverallCode.String())
	}
	if want := "OK OK OVER_LIMIT"; strings.Join(codes, " ") != want {
		t.Fatalf("codes %v, want %s", codes, want)
	}
}

// On a Redis Cluster, two limiters and 48 concurrent gRPC clients: exactly
// the limit admitted per address and algorithm, the addresses' keys spread
// over the primaries. Fixed windows are an hour: a round an hour ends in
// is run again, with other addresses.
func TestRLSExactOnCluster(t *testing.T) {
	const limit, addrs = 20, 8
	files := map[string]string{}
	for alg, rl := range rlsAlgorithms {
		rl = strings.Replace(rl, "requests_per_unit: 100", fmt.Sprintf("requests_per_unit: %d", limit), 1)
		rl = strings.Replace(rl, "burst: 100", fmt.Sprintf("burst: %d", limit), 1)
		files[alg+".yaml"] = fmt.Sprintf("domain: cluster-%s\ndescriptors:\n  - key: remote_address\n    %s\n", alg, rl)
	}
	s := startClusterSystem(t, 2, limit, "RLS_CONFIG_DIR", rlsDir(t, files), "REDIS_TIMEOUT", "2s")
	clients := []rlsv3.RateLimitServiceClient{rlsClient(t, s.limiters[0]), rlsClient(t, s.limiters[1])}
	for attempt := 0; ; attempt++ {
		hour := time.Now().Truncate(time.Hour)
		type target struct{ alg, addr string }
		var all []target
		for alg := range rlsAlgorithms {
			for i := range addrs {
				for range 3 * limit {
					all = append(all, target{alg, fmt.Sprintf("198.18.%d.%d", attempt, i)})
				}
			}
		}
		jobs := make(chan target)
		var mu sync.Mutex
		admitted := map[target]int{}
		var failed []error
		var wg sync.WaitGroup
		for w := range 48 {
			wg.Go(func() {
				for tg := range jobs {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					resp, err := clients[w%2].ShouldRateLimit(ctx, rlsRequest("cluster-"+tg.alg, "remote_address="+tg.addr))
					cancel()
					mu.Lock()
					if err != nil {
						failed = append(failed, err)
					} else if resp.OverallCode == rlsv3.RateLimitResponse_OK {
						admitted[tg]++
					}
					mu.Unlock()
				}
			})
		}
		for _, tg := range all {
			jobs <- tg
		}
		close(jobs)
		wg.Wait()
		if hour != time.Now().Truncate(time.Hour) && attempt == 0 {
			t.Log("an hour ended during the round: again")
			continue
		}
		if len(failed) > 0 {
			t.Fatalf("%d of %d calls failed, first: %v", len(failed), len(all), failed[0])
		}
		for alg := range rlsAlgorithms {
			for i := range addrs {
				tg := target{alg, fmt.Sprintf("198.18.%d.%d", attempt, i)}
				if admitted[tg] != limit {
					t.Errorf("%s, %s: %d admitted across 2 limiters, want exactly %d", alg, tg.addr, admitted[tg], limit)
				}
			}
		}
		return
	}
}

// A rate limit API violation reaches Postgres through the archiver, with
// its domain and descriptors.
func TestRLSViolationsAreArchived(t *testing.T) {
	e, db := archiverEnv(t)
	dir := rlsDir(t, map[string]string{"edge.yaml": "domain: edge\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"})
	lim := e.start("limiter", "RLS_CONFIG_DIR", dir)
	e.start("archiver")
	client := rlsClient(t, lim)
	key := "k-" + e.vars["REDIS_KEY_PREFIX"]
	testkit.AvoidHourEnd(t) // after the start, which may take long: the two calls count in one hour's window
	var codes []string
	for range 2 {
		resp, err := client.ShouldRateLimit(context.Background(), rlsRequest("edge", "api_key="+key))
		if err != nil {
			t.Fatal(err)
		}
		codes = append(codes, resp.OverallCode.String())
	}
	if codes[1] != "OVER_LIMIT" {
		t.Fatalf("codes %v, want the second over the limit of 1", codes)
	}
	query := fmt.Sprintf(`SELECT count(*) FROM rate_limit_violations WHERE domain = 'edge'
		AND descriptors->0->'entries'->0->>'value' = '%s' AND descriptors->0->>'code' = 'OVER_LIMIT'
		AND rule_id = 'rls.edge.api_key' AND host(ip_address) = '0.0.0.0'`, key)
	testkit.WaitFor(t, 15*time.Second, "the violation in Postgres", func() bool { return count(t, db, query) == 1 })
}
