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

	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/kafkatest"
)

// answer is what one check of a load run got.
type answer struct {
	sent    time.Time
	latency time.Duration
	status  int
	mode    string
	err     error
}

// loadRun sends checks to a limiter from concurrent clients, each with IPs
// of its own (so the api rule never limits them), until stopped.
type loadRun struct {
	stopping chan struct{}
	wg       sync.WaitGroup
	answered atomic.Int64 // 200 or 429 with a decision body
	failed   atomic.Int64 // anything else, transport errors included
	slowest  atomic.Int64 // nanoseconds
}

func startLoad(t *testing.T, addr string, clients int, pause time.Duration, record func(answer)) *loadRun {
	t.Helper()
	l := &loadRun{stopping: make(chan struct{})}
	httpc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	for c := range clients {
		l.wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-l.stopping:
					return
				default:
				}
				a := checkOnce(httpc, addr, fmt.Sprintf("10.%d.%d.%d", c, i>>8&255, i&255))
				if a.err == nil && (a.status == http.StatusOK || a.status == http.StatusTooManyRequests) {
					l.answered.Add(1)
				} else {
					l.failed.Add(1)
				}
				for {
					s := l.slowest.Load()
					if int64(a.latency) <= s || l.slowest.CompareAndSwap(s, int64(a.latency)) {
						break
					}
				}
				if record != nil {
					record(a)
				}
				time.Sleep(pause)
			}
		})
	}
	t.Cleanup(l.stop)
	return l
}

func checkOnce(httpc *http.Client, addr, ip string) answer {
	a := answer{sent: time.Now()}
	defer func() { a.latency = time.Since(a.sent) }()
	resp, err := httpc.Post("http://"+addr+"/v1/check", "application/json",
		strings.NewReader(fmt.Sprintf(`{"ip":%q,"endpoint":"/api/load"}`, ip)))
	if err != nil {
		a.err = err
		a.latency = time.Since(a.sent)
		return a
	}
	defer resp.Body.Close()
	a.status = resp.StatusCode
	var body struct {
		Mode string `json:"mode"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		a.err = fmt.Errorf("decode answer (status %d): %w", resp.StatusCode, err)
	}
	a.mode = body.Mode
	a.latency = time.Since(a.sent)
	return a
}

// stop ends the run and waits for every client; safe to call twice.
func (l *loadRun) stop() {
	select {
	case <-l.stopping:
	default:
		close(l.stopping)
	}
	l.wg.Wait()
}

// The broker is down for 10 s while 24 clients send checks: every check is
// answered, events beyond the queue are dropped and counted, and publishing
// resumes by itself when the broker is back.
func TestBrokerOutageUnderLoad(t *testing.T) {
	e := newEnv(t)
	limiter := e.start("limiter", "EVENT_QUEUE_SIZE", "200")
	var lastErr atomic.Value
	load := startLoad(t, limiter.addr, 24, 2*time.Millisecond, func(a answer) {
		if a.err != nil {
			lastErr.Store(a.err.Error())
		} else if a.status != http.StatusOK {
			lastErr.Store(fmt.Sprintf("status %d", a.status))
		}
	})
	testkit.WaitFor(t, 10*time.Second, "events to be published", func() bool {
		return limiter.metric(t, "rate_limit_events_published_total") > 0
	})

	e.broker.Stop()
	outage := time.Now()
	testkit.WaitFor(t, 10*time.Second, "events to be dropped once the queue is full", func() bool {
		return limiter.metric(t, "rate_limit_events_dropped_total") > 0
	})
	answeredBefore := load.answered.Load()
	time.Sleep(10*time.Second - time.Since(outage))
	if n := load.answered.Load() - answeredBefore; n < 100 {
		t.Errorf("only %d checks answered during the outage", n)
	}
	published := limiter.metric(t, "rate_limit_events_published_total")
	dropped := limiter.metric(t, "rate_limit_events_dropped_total")

	e.broker.Restart(t, decisionsTopic, bansTopic, outcomesTopic)
	testkit.WaitFor(t, 20*time.Second, "publishing to resume after the broker returned", func() bool {
		return limiter.metric(t, "rate_limit_events_published_total") > published
	})
	msgs := kafkatest.ReadMessages(t, e.broker.Brokers(), decisionsTopic, 10, 10*time.Second)
	load.stop()

	t.Logf("%d checks answered, %d failed, slowest %v; %v published before the restart, %v dropped, %d new events read after it",
		load.answered.Load(), load.failed.Load(), time.Duration(load.slowest.Load()), published, dropped, len(msgs))
	if n := load.failed.Load(); n > 0 {
		t.Fatalf("%d checks failed during the broker outage (last: %v)", n, lastErr.Load())
	}
}
