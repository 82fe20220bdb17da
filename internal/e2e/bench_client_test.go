//go:build bench

package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
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
