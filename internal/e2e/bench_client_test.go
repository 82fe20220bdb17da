//go:build bench

package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/client"
)

const clientBenchRules = `
rules:
  - id: books
    match: {endpoints: ["/api/books/**"]}
    key: [ip]
    algorithm: token_bucket
    limits: [{rate: 1000000, per: 1s, burst: 1000000}]
`

// TestBenchClientMiddleware (make bench) measures what client.Middleware
// adds to a request over the bare handler, with the real limiter on
// loopback: the latency of sequential requests (one at a time, so each is
// the round trip it pays and no queue) and the CPU of this process (the
// application and its load, the same in both) per request, bare and with
// the middleware in alternating rounds; reports are on. The limiter's
// events go nowhere (no broker answers at its KAFKA_BROKERS): the embedded
// broker would run in this process and its CPU would count as the
// middleware's.
func TestBenchClientMiddleware(t *testing.T) {
	e := newEnvWith(t, clientBenchRules)
	// REDIS_TIMEOUT: a round trip over the production 50 ms on this shared
	// 2-core machine makes the rule refuse, which is no cost of the client.
	lim := e.start("limiter", "KAFKA_BROKERS", "127.0.0.1:1", "REDIS_TIMEOUT", "1s")
	c, err := client.New(client.Config{URL: "http://" + lim.addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/books/{id}", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "book") })
	apps := map[string]http.Handler{"bare": mux, "middleware": client.Middleware(c, client.MiddlewareConfig{Mux: mux})(mux),
		"middleware without reports": client.Middleware(c, client.MiddlewareConfig{Mux: mux, ReportIf: client.NeverReport})(mux)}
	urls := map[string]string{}
	for name, h := range apps {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: h}
		go srv.Serve(ln)
		defer srv.Close()
		urls[name] = "http://" + ln.Addr().String() + "/api/books/17"
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	get := func(url string) {
		resp, err := hc.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s %v", url, resp.StatusCode, body, resp.Header)
		}
	}
	const sequential, concurrent, workers, rounds = 3000, 20000, 16, 3
	type round struct{ p50, p99, cpu time.Duration }
	results := map[string][]round{}
	for range rounds {
		for _, name := range []string{"bare", "middleware", "middleware without reports"} {
			lat := make([]time.Duration, 0, sequential)
			for range sequential {
				start := time.Now()
				get(urls[name])
				lat = append(lat, time.Since(start))
			}
			slices.Sort(lat)
			// CPU under load: sequential requests would count the runtime
			// spinning while it waits for the limiter.
			cpu0 := processCPU(t)
			var wg sync.WaitGroup
			for range workers {
				wg.Go(func() {
					for range concurrent / workers {
						get(urls[name])
					}
				})
			}
			wg.Wait()
			cpu := processCPU(t) - cpu0
			results[name] = append(results[name], round{lat[len(lat)/2], lat[len(lat)*99/100], cpu / concurrent})
		}
	}
	for r := range rounds {
		b, m, n := results["bare"][r], results["middleware"][r], results["middleware without reports"][r]
		fmt.Printf("client middleware round %d: sequential p50 %v -> %v (+%v), p99 %v -> %v; CPU per request under load (%d connections) %v -> %v (+%v; without reports +%v)\n", r+1,
			b.p50.Round(time.Microsecond), m.p50.Round(time.Microsecond), (m.p50 - b.p50).Round(time.Microsecond),
			b.p99.Round(time.Microsecond), m.p99.Round(time.Microsecond), workers,
			b.cpu.Round(100*time.Nanosecond), m.cpu.Round(100*time.Nanosecond), (m.cpu - b.cpu).Round(100*time.Nanosecond),
			(n.cpu - b.cpu).Round(100*time.Nanosecond))
	}
	if s := c.Stats(); s.Fallbacks != 0 {
		t.Fatalf("%d checks fell back", s.Fallbacks)
	}
}

// processCPU is this process's user and system CPU time so far.
func processCPU(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestBenchClientReportDrain (make bench) measures how long ReportAsync's
// queue of 10 000 outcomes takes to reach the real limiter, all valid and
// with one the limiter would refuse (no IP address) in every 100. A batch
// the limiter refuses for one outcome is sent again one outcome at a time;
// ReportAsync refuses such an outcome before it is queued, so the invalid
// ones cost the drain nothing.
func TestBenchClientReportDrain(t *testing.T) {
	e := newEnvWith(t, clientBenchRules)
	lim := e.start("limiter", "KAFKA_BROKERS", "127.0.0.1:1", "REDIS_TIMEOUT", "1s")
	const n = 10_000
	drain := func(invalidEvery int) (time.Duration, client.Stats) {
		c, err := client.New(client.Config{URL: "http://" + lim.addr, ReportQueue: 2 * n, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		for i := range n {
			o := client.Outcome{IP: "198.51.100.9", Endpoint: "/api/books/17", Method: "GET", Status: 200}
			if invalidEvery > 0 && i%invalidEvery == invalidEvery-1 {
				o.IP = "not-an-ip"
			}
			c.ReportAsync(&o)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if err := c.Close(ctx); err != nil {
			t.Fatal(err)
		}
		return time.Since(start), c.Stats()
	}
	for round := range 3 {
		valid, vs := drain(0)
		mixed, ms := drain(100)
		fmt.Printf("client report drain round %d: %d outcomes all valid %v (%.0f/s); one invalid per 100 %v (%.0f/s), %.1fx; sent %d and %d, failed %d and %d\n",
			round+1, n, valid.Round(time.Millisecond), n/valid.Seconds(), mixed.Round(time.Millisecond), n/mixed.Seconds(),
			mixed.Seconds()/valid.Seconds(), vs.ReportsSent, ms.ReportsSent, vs.ReportsFailed, ms.ReportsFailed)
	}
}

// TestBenchClientBatching (make bench) measures what batching concurrent
// checks saves: 64 requests at once through client.Middleware, with the
// real limiter on loopback, batching on (the default) and off
// (DisableBatching), in alternating rounds beside the bare handler. Per
// decision: the limiter's CPU (its /proc stat) plus the client's (this
// process's, less what the bare handler and its load cost in the same
// round); the p50 and p99 at 64 concurrent; and the p50 of a lone request
// (sequential), which batching must leave as it is. Reports are off: the
// outcomes of ReportAsync are batched either way.
func TestBenchClientBatching(t *testing.T) {
	e := newEnvWith(t, clientBenchRules)
	lim := e.start("limiter", "KAFKA_BROKERS", "127.0.0.1:1", "REDIS_TIMEOUT", "1s")
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/books/{id}", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "book") })
	clients := map[string]*client.Client{}
	// BATCH_WAIT sets Config.BatchWait (default 100µs), to compare windows.
	wait, _ := time.ParseDuration(os.Getenv("BATCH_WAIT"))
	for name, off := range map[string]bool{"on": false, "off": true} {
		c, err := client.New(client.Config{URL: "http://" + lim.addr, DisableBatching: off, BatchWait: wait})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		clients[name] = c
	}
	apps := map[string]http.Handler{"bare": mux}
	for name, c := range clients {
		apps[name] = client.Middleware(c, client.MiddlewareConfig{Mux: mux, ReportIf: client.NeverReport})(mux)
	}
	urls := map[string]string{}
	for name, h := range apps {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: h}
		go srv.Serve(ln)
		defer srv.Close()
		urls[name] = "http://" + ln.Addr().String() + "/api/books/17"
	}
	const workers, perRound, sequential, rounds = 64, 20000, 2000, 3
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers}}
	get := func(url string) time.Duration {
		start := time.Now()
		resp, err := hc.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", url, resp.StatusCode, body)
		}
		return time.Since(start)
	}
	limiterCPU := func() time.Duration {
		f, _, ok := stat(lim.cmd.Process.Pid)
		if !ok {
			t.Fatal("no /proc stat of the limiter")
		}
		user, _ := strconv.ParseInt(f[11], 10, 64)
		sys, _ := strconv.ParseInt(f[12], 10, 64)
		return time.Duration(user+sys) * (time.Second / 100) // clock ticks (USER_HZ 100)
	}
	type round struct {
		proc, limiter     time.Duration // per request
		p50, p99, loneP50 time.Duration
		rate              float64
	}
	results := map[string][]round{}
	names := []string{"bare", "off", "on"}
	for r := range rounds {
		if r%2 == 1 {
			names = []string{"bare", "on", "off"}
		} else {
			names = []string{"bare", "off", "on"}
		}
		for _, name := range names {
			lone := make([]time.Duration, 0, sequential)
			for range sequential {
				lone = append(lone, get(urls[name]))
			}
			slices.Sort(lone)
			lat := make([][]time.Duration, workers)
			cpu0, lim0, start := processCPU(t), limiterCPU(), time.Now()
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					for range perRound / workers {
						lat[w] = append(lat[w], get(urls[name]))
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			n := time.Duration(perRound / workers * workers)
			all := slices.Concat(lat...)
			slices.Sort(all)
			results[name] = append(results[name], round{proc: (processCPU(t) - cpu0) / n, limiter: (limiterCPU() - lim0) / n,
				p50: all[len(all)/2], p99: all[len(all)*99/100], loneP50: lone[len(lone)/2], rate: float64(n) / elapsed.Seconds()})
		}
	}
	fmt.Printf("client batching (BatchWait %v), %d concurrent through the middleware, load %s:\n", wait, workers, loadAverage(t))
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }
	for r := range rounds {
		b := results["bare"][r]
		cost := map[string]time.Duration{}
		for _, name := range []string{"off", "on"} {
			x := results[name][r]
			cost[name] = x.limiter + x.proc - b.proc
			fmt.Printf("  round %d batching %-3s: limiter %.1f µs + client %.1f µs = %.1f µs per decision; %.0f/s; p50 %.0f µs (bare %.0f), p99 %.0f µs; lone p50 %.0f µs (bare %.0f)\n",
				r+1, name, us(x.limiter), us(x.proc-b.proc), us(cost[name]), x.rate, us(x.p50), us(b.p50), us(x.p99), us(x.loneP50), us(b.loneP50))
		}
		on, off := results["on"][r], results["off"][r]
		fmt.Printf("  round %d: on/off CPU per decision %.2f×; p50 added by batching %+.0f µs; lone p50 %+.0f µs\n",
			r+1, float64(cost["on"])/float64(cost["off"]), us(on.p50-off.p50), us(on.loneP50-off.loneP50))
	}
	for name, c := range clients {
		if s := c.Stats(); s.Fallbacks != 0 || s.CallerGone != 0 {
			t.Fatalf("batching %s: stats %+v", name, s)
		}
	}
}
