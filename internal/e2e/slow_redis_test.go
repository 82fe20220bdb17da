package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
// the limiter gives up on the answer) admit at most the limit, for every
// algorithm, however many of their round trips time out. A decision whose
// round trip timed out may have been counted in Redis, so it must never be
// admitted on a budget of its own.
func TestSlowRedisNeverAdmitsPastTheLimit(t *testing.T) {
	e := newEnv(t)
	proxy := redistest.StartSlowProxy(t, redistest.Addr(t))
	rules := writeRules(t, slowRules)
	var limiters []*proc
	for range 3 {
		limiters = append(limiters, e.start("limiter", "RULES_FILE", rules, "REDIS_URL", "redis://"+proxy.Addr()+"/0"))
	}
	proxy.SetDelay(5, 120*time.Millisecond) // REDIS_TIMEOUT is 50ms
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 10 * time.Second}
	for i, alg := range []string{"fw", "sw", "swc", "tb"} {
		t.Run(alg, func(t *testing.T) {
			ip := fmt.Sprintf("198.51.100.%d", 200+i)
			body := fmt.Sprintf(`{"ip":%q,"endpoint":"/%s"}`, ip, alg)
			var admitted, refused, failed atomic.Int64
			var wg sync.WaitGroup
			for g := range 150 {
				lim := limiters[g%len(limiters)]
				wg.Go(func() {
					for range 4 {
						resp, err := client.Post("http://"+lim.addr+"/v1/check", "application/json", strings.NewReader(body))
						if err != nil {
							failed.Add(1)
							continue
						}
						d := decision{Status: resp.StatusCode}
						err = json.NewDecoder(resp.Body).Decode(&d)
						resp.Body.Close()
						switch {
						case err != nil || d.Status != http.StatusOK:
							failed.Add(1)
						case d.Allowed:
							admitted.Add(1)
						default:
							refused.Add(1)
						}
					}
				})
			}
			wg.Wait()
			t.Logf("%s: %d admitted, %d refused of 600 (limit 100); %d replies held back so far",
				alg, admitted.Load(), refused.Load(), proxy.Delayed())
			if failed.Load() != 0 {
				t.Errorf("%d requests failed", failed.Load())
			}
			if admitted.Load() > 100 {
				t.Errorf("%d admitted, more than the limit of 100", admitted.Load())
			}
		})
	}
	if proxy.Delayed() == 0 {
		t.Fatal("no reply was held back: the test did not exercise a slow Redis")
	}
	timeouts := 0.0
	for _, l := range limiters {
		timeouts += l.metric(t, "rate_limit_redis_errors_total", `class="timeout"`)
	}
	if timeouts == 0 {
		t.Fatal("no round trip timed out: the test did not exercise a slow Redis")
	}
}
