package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// flood sends checks of one hot endpoint from clients per limiter, each
// client with a keep-alive connection of its own, until stopped. It counts
// the answers of each limiter: an admission is counted when the answer
// says allowed, whatever happens next, the answers of a limiter killed
// mid-run included.
type flood struct {
	limiters []*proc
	stopping chan struct{}
	wg       sync.WaitGroup
	per      []floodCount

	mu       sync.Mutex
	modes    map[string]int64
	failures []string
}

// floodCount is what one limiter answered.
type floodCount struct {
	admitted, denied, failed atomic.Int64
	streak                   atomic.Int64 // denials since its last admission
	// cut is the clients that had a check fail: of a killed limiter, each
	// had at most one check in flight that it may have decided, and debited,
	// without answering.
	cut atomic.Int64
}

// startFlood starts clients goroutines per limiter sending {"ip", endpoint}
// with pause between a client's checks (0: none). It stops when the test
// ends, if not before.
func startFlood(t *testing.T, limiters []*proc, clients int, endpoint string, pause time.Duration) *flood {
	t.Helper()
	f := &flood{limiters: limiters, stopping: make(chan struct{}), per: make([]floodCount, len(limiters)), modes: map[string]int64{}}
	for i, lim := range limiters {
		transport := &http.Transport{MaxIdleConnsPerHost: clients}
		httpc := &http.Client{Timeout: 5 * time.Second, Transport: transport}
		for c := range clients {
			body := fmt.Sprintf(`{"ip":"198.18.%d.%d","endpoint":%q}`, i, c%250+1, endpoint)
			f.wg.Go(func() { f.client(httpc, lim, &f.per[i], body, pause) })
		}
		t.Cleanup(transport.CloseIdleConnections)
	}
	t.Cleanup(f.stop)
	return f
}

func (f *flood) client(httpc *http.Client, lim *proc, n *floodCount, body string, pause time.Duration) {
	cut := false
	for {
		select {
		case <-f.stopping:
			return
		case <-lim.done: // killed: its clients have no one to ask
			return
		default:
		}
		allowed, mode, err := leaseCheck(httpc, lim.addr, body)
		switch {
		case err != nil:
			n.failed.Add(1)
			if !cut {
				cut = true
				n.cut.Add(1)
			}
			f.mu.Lock()
			if len(f.failures) < 5 {
				f.failures = append(f.failures, err.Error())
			}
			f.mu.Unlock()
			select {
			case <-lim.done:
				return
			case <-time.After(10 * time.Millisecond): // a killed limiter is not reaped at once
			}
		case allowed:
			n.admitted.Add(1)
			n.streak.Store(0)
		default:
			n.denied.Add(1)
			n.streak.Add(1)
		}
		if err == nil {
			f.mu.Lock()
			f.modes[mode]++
			f.mu.Unlock()
		}
		if pause > 0 {
			time.Sleep(pause)
		}
	}
}

// leaseCheck posts one check and returns its verdict and mode; anything but
// a 200 or 429 with a decision is an error.
func leaseCheck(httpc *http.Client, addr, body string) (allowed bool, mode string, err error) {
	resp, err := httpc.Post("http://"+addr+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		return false, "", err
	}
	defer resp.Body.Close()
	var d struct {
		Allowed bool   `json:"allowed"`
		Mode    string `json:"mode"`
	}
	err = json.NewDecoder(resp.Body).Decode(&d)
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusTooManyRequests {
		return false, "", fmt.Errorf("status %d", resp.StatusCode)
	}
	if err != nil {
		return false, "", fmt.Errorf("status %d: %w", resp.StatusCode, err)
	}
	return d.Allowed, d.Mode, nil
}

// stop ends the run and waits for every client; safe to call twice.
func (f *flood) stop() {
	select {
	case <-f.stopping:
	default:
		close(f.stopping)
	}
	f.wg.Wait()
}

// admitted is the number of admissions across all limiters so far.
func (f *flood) admitted() int64 {
	var sum int64
	for i := range f.per {
		sum += f.per[i].admitted.Load()
	}
	return sum
}

// exhausted reports whether every live limiter has answered n denials in a
// row: it holds no lease units any more and Redis has none left to lend.
func (f *flood) exhausted(n int64) bool {
	for i, lim := range f.limiters {
		select {
		case <-lim.done:
			continue
		default:
		}
		if f.per[i].streak.Load() < n {
			return false
		}
	}
	return true
}

// deniedEverywhere reports whether every live limiter has denied at least n
// checks.
func (f *flood) deniedEverywhere(n int64) bool {
	for i, lim := range f.limiters {
		select {
		case <-lim.done:
			continue
		default:
		}
		if f.per[i].denied.Load() < n {
			return false
		}
	}
	return true
}

// summary describes the counts per limiter, for logs and failures.
func (f *flood) summary() string {
	var b strings.Builder
	for i := range f.per {
		n := &f.per[i]
		fmt.Fprintf(&b, "limiter-%d %d admitted/%d denied/%d failed; ", i+1, n.admitted.Load(), n.denied.Load(), n.failed.Load())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	fmt.Fprintf(&b, "modes %v", f.modes)
	return b.String()
}

// requireAnswered fails the test when a live limiter failed to answer a
// check: every check of these tests must be decided.
func (f *flood) requireAnswered(t *testing.T) {
	t.Helper()
	var failed int64
	for i := range f.per {
		failed += f.per[i].failed.Load()
	}
	if failed > 0 {
		f.mu.Lock()
		defer f.mu.Unlock()
		t.Fatalf("%d checks got no decision, e.g. %v", failed, f.failures)
	}
}

// requireDecidedInRedis fails the test when a check was answered in local
// or permissive mode: such answers are outside the leases' guarantee, and
// these tests keep Redis up.
func (f *flood) requireDecidedInRedis(t *testing.T) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.modes["local"] > 0 || f.modes["permissive"] > 0 {
		t.Fatalf("modes %v: every check must be decided on Redis's budget", f.modes)
	}
}

// redisNow is the time on Redis's clock, which decides every window.
func redisNow(t *testing.T, c redis.UniversalClient) time.Time {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	now, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatalf("redis TIME: %v", err)
	}
	return now
}

// avoidWindowEnd waits past the end of Redis's current window of per when
// it is less than a minute away, so that a round fits in one window.
func avoidWindowEnd(t *testing.T, c redis.UniversalClient, per time.Duration) {
	t.Helper()
	now := redisNow(t, c)
	if left := now.Truncate(per).Add(per).Sub(now); left < time.Minute {
		t.Logf("waiting %v for Redis's window of %v to turn", left.Round(time.Millisecond), per)
		time.Sleep(left + time.Second)
	}
}

// requireOneWindow skips the test when [t0, t1] on Redis's clock spans two
// windows of per (epoch-aligned, as the scripts align them): the counts
// would then belong to two budgets.
func requireOneWindow(t *testing.T, t0, t1 time.Time, per time.Duration) {
	t.Helper()
	if t0.UnixMilli()/per.Milliseconds() != t1.UnixMilli()/per.Milliseconds() {
		t.Skipf("the round spanned two windows of %v on Redis's clock (%v to %v)", per, t0, t1)
	}
}

// leaseMetrics are a limiter's lease counters at one moment.
type leaseMetrics struct{ decisions, granted, returned, keys, units float64 }

func readLeaseMetrics(t *testing.T, p *proc) leaseMetrics {
	t.Helper()
	return leaseMetrics{
		decisions: p.metric(t, "rate_limit_lease_decisions_total"),
		granted:   p.metric(t, "rate_limit_lease_units_granted_total"),
		returned:  p.metric(t, "rate_limit_lease_units_returned_total"),
		keys:      p.metric(t, "rate_limit_lease_keys"),
		units:     p.metric(t, "rate_limit_lease_units"),
	}
}

func allLeaseMetrics(t *testing.T, lims []*proc) []leaseMetrics {
	t.Helper()
	out := make([]leaseMetrics, len(lims))
	for i, l := range lims {
		out[i] = readLeaseMetrics(t, l)
	}
	return out
}
