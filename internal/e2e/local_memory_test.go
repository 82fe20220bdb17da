package e2e

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ratewarden/ratewarden/internal/testkit/proctest"
)

// localRules limits each user, in local mode while Redis is away; one
// request leaves state that lives 6 minutes, so a flood is not swept away.
const localRules = `
rules:
  - id: per-user
    match: {endpoints: ["/api/**"]}
    key: [user_id]
    algorithm: token_bucket
    limits: [{rate: 10, per: 1h, burst: 10}] # one request: state kept 6 minutes
    on_redis_failure: local
`

// localRSSBound is the resident memory docs/operations.md promises for a limiter at the
// default LOCAL_MAX_KEYS (100 000), whatever the number of subjects.
const localRSSBound = 160 << 20

// During a Redis outage, 500 000 distinct subjects: the limiter keeps
// answering in local mode, and its resident memory stays under the bound
// docs/operations.md states, because local state is bounded.
func TestLocalStateIsBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("500 000 requests")
	}
	e := newEnv(t)
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(localRules), 0o600); err != nil {
		t.Fatal(err)
	}
	// Neither Redis nor Kafka answers: every decision is local, every
	// event is dropped from the bounded queue.
	lim := e.start("limiter", "RULES_FILE", path, "REDIS_URL", "redis://"+proctest.FreeAddr(t)+"/0", "KAFKA_BROKERS", proctest.FreeAddr(t))

	const subjects, clients = 500_000, 32
	transport := &http.Transport{MaxIdleConnsPerHost: clients}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport}
	var next, local, failed atomic.Int64
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > subjects {
					return
				}
				body := fmt.Sprintf(`{"ip":"192.0.2.1","endpoint":"/api/a","user_id":"flood-%d"}`, i)
				resp, err := client.Post("http://"+lim.addr+"/v1/check", "application/json", strings.NewReader(body))
				if err != nil {
					failed.Add(1)
					continue
				}
				var buf [512]byte
				n, _ := resp.Body.Read(buf[:])
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK && strings.Contains(string(buf[:n]), `"mode":"local"`) {
					local.Add(1)
				} else {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if local.Load() != subjects || failed.Load() != 0 {
		t.Fatalf("%d of %d checks answered in local mode, %d failed", local.Load(), subjects, failed.Load())
	}
	rss := residentBytes(t, lim.cmd.Process.Pid)
	keys := lim.metric(t, "rate_limit_local_keys")
	t.Logf("after %d subjects: RSS %d MB, %v local keys, %v evictions", subjects, rss>>20, keys, lim.metric(t, "rate_limit_local_evictions_total"))
	if keys > 100_000 {
		t.Errorf("%v local keys, over the default bound of 100 000", keys)
	}
	if rss > localRSSBound {
		t.Errorf("RSS %d MB, over the %d MB docs/operations.md states", rss>>20, localRSSBound>>20)
	}
	if d := check(t, lim, "192.0.2.2", "/api/a"); d.Status != http.StatusOK {
		t.Errorf("a check after the flood: %+v", d)
	}
}

// residentBytes reads the resident set size of process pid.
func residentBytes(t *testing.T, pid int) int64 {
	t.Helper()
	n, err := procStatusBytes(pid, "VmRSS")
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// procStatusBytes reads a memory field of process pid's /proc status in
// bytes: VmRSS (resident now) or VmHWM (the peak resident so far). It may
// be called from any goroutine.
func procStatusBytes(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, err
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}
