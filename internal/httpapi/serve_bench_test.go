package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/httpapi"
	"github.com/ratewarden/ratewarden/internal/kafkabus"
	"github.com/ratewarden/ratewarden/internal/limiter"
	"github.com/ratewarden/ratewarden/internal/ops"
	"github.com/ratewarden/ratewarden/internal/redisstore"
	"github.com/ratewarden/ratewarden/internal/rules"
	"github.com/ratewarden/ratewarden/internal/testkit/limitertest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// The Serve benchmarks measure what one decision costs the server on the
// real HTTP path: the decision port's handler behind ops.Listener on a
// loopback port, as cmd/limiter serves it, the real local Redis through the coalescer, and
// events encoded and handed to the publisher. The client writes prebuilt
// requests on raw keep-alive connections and reads the answers through a
// reused buffer, so it allocates nothing per request: allocs/op (the
// process's runtime.MemStats.Mallocs over the run ÷ requests) is the
// server's allocations per decision. BenchmarkServeFloor is the same client
// against a handler that does nothing but answer: what the HTTP server
// itself costs, the part no handler can save.
//
//	go test -run '^$' -bench '^BenchmarkServe' -benchtime 20000x -count 3 ./internal/httpapi/
//
// Events go to a publisher that drops them unless BENCH_KAFKA_BROKERS names
// a broker (bin/devkafka in another process, say): an in-process broker's
// own allocations would count as the server's.

// serveConns is the number of client connections, as many goroutines.
const serveConns = 32

func BenchmarkServeCheck(b *testing.B) {
	h, trips := benchHandler(b, decide.SlidingWindow)
	benchServe(b, &ops.Listener{Fast: h}, "/v1/check", trips, 1, benchCheck)
}

// BenchmarkServeBatch compares, for a fixed-window and a sliding-window
// rule, single checks (BenchmarkServeCheck) with the same checks sent in
// batches (POST /v1/check/batch) of 10 and 50: cpu-ns/decision and
// allocs/decision are what one decision costs.
//
//	go test -run '^$' -bench '^BenchmarkServeBatch$' -benchtime 20000x ./internal/httpapi/
func BenchmarkServeBatch(b *testing.B) {
	for _, alg := range []decide.Algorithm{decide.FixedWindow, decide.SlidingWindow} {
		b.Run(string(alg)+"/single", func(b *testing.B) {
			h, trips := benchHandler(b, alg)
			benchServe(b, &ops.Listener{Fast: h}, "/v1/check", trips, 1, benchCheck)
		})
		for _, n := range []int{10, 50} {
			b.Run(string(alg)+"/"+strconv.Itoa(n), func(b *testing.B) {
				h, trips := benchHandler(b, alg)
				benchServe(b, &ops.Listener{Fast: h}, "/v1/check/batch", trips, n, func(i int) string {
					checks := make([]string, n)
					for j := range checks {
						checks[j] = benchCheck(i*n + j)
					}
					return `{"checks":[` + strings.Join(checks, ",") + `]}`
				})
			})
		}
	}
}

// BenchmarkServeReportBatch compares a batch of 100 outcome reports (POST
// /v1/report/batch, a sliding-window rule spent by reports) with a batch of
// 100 checks (POST /v1/check/batch, the same rule spent by checks), one
// batch at a time over one connection: ns/op is the time to answer one
// batch, roundtrips/op the coalescer's round trips it took.
//
//	go test -run '^$' -bench '^BenchmarkServeReportBatch$' -benchtime 2000x -count 3 ./internal/httpapi/
func BenchmarkServeReportBatch(b *testing.B) {
	const n = 100
	rule := func(spentBy rules.SpendingCall) rules.Rule {
		return rules.Rule{ID: "per-ip", Algorithm: decide.SlidingWindow, Key: []string{"ip"}, SpentBy: spentBy,
			Match: rules.Match{Endpoints: []string{"/api/**"}}, Limits: []rules.Limit{{Requests: 1_000_000, Per: rules.Duration(time.Second)}}}
	}
	for _, tc := range []struct {
		name, path, field string
		rule              rules.Rule
		item              func(i int) string
	}{
		{"checks", "/v1/check/batch", "checks", rule(rules.SpentByCheck), benchCheck},
		{"reports", "/v1/report/batch", "reports", rule(rules.SpentByReport), func(i int) string {
			return strings.TrimSuffix(benchCheck(i), "}") + `,"status":401}`
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			h, trips := benchHandlerFor(b, tc.rule)
			addr := strings.TrimPrefix(serve(b, &ops.Listener{Fast: h}), "http://")
			rc, err := dialRaw(addr)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = rc.conn.Close() })
			for i := range 16 {
				items := make([]string, n)
				for j := range items {
					items[j] = tc.item(i*n + j)
				}
				rc.reqs = append(rc.reqs, buildPost(tc.path, `{"`+tc.field+`":[`+strings.Join(items, ",")+`]}`))
			}
			for range 50 { // warm-up
				if err := rc.roundTrip(); err != nil {
					b.Fatal(err)
				}
			}
			trips.reset()
			b.ResetTimer()
			for range b.N {
				if err := rc.roundTrip(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(trips.trips.Load())/float64(b.N), "roundtrips/op")
		})
	}
}

// benchCheck is the i-th check of the Serve benchmarks: one client IP each.
func benchCheck(i int) string {
	return `{"ip":"10.1.` + strconv.Itoa(i/256%256) + `.` + strconv.Itoa(i%256) + `","endpoint":"/api/books/17","method":"GET"}`
}

// benchHandler is the decision port's handler as the limiter serves it: a
// rule of algorithm per client IP, the real local Redis through the
// coalescer (whose round trips and Redis CPU it counts), events to
// benchPublisher.
func benchHandler(b *testing.B, algorithm decide.Algorithm) (fasthttp.RequestHandler, *roundTrips) {
	return benchHandlerFor(b, rules.Rule{
		ID: "per-ip", Algorithm: algorithm, Key: []string{"ip"}, Match: rules.Match{Endpoints: []string{"/api/**"}},
		Limits: []rules.Limit{{Requests: 1_000_000, Per: rules.Duration(time.Second)}},
	})
}

// benchHandlerFor is benchHandler with rule as the one rule, outcome
// events to benchPublisher too.
func benchHandlerFor(b *testing.B, rule rules.Rule) (fasthttp.RequestHandler, *roundTrips) {
	rdb := plainRedis(b)
	trips := &roundTrips{redisPID: redisPID(b, rdb)}
	set, err := rules.Compile(&rules.File{Rules: []rules.Rule{rule}}, rules.Options{KeyPrefix: redistest.Prefix(b, rdb)})
	if err != nil {
		b.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	pub := benchPublisher(b, reg)
	svc := limitertest.Service(b, redisstore.New(rdb), set, limitertest.Options{
		Limiter:  limiter.Config{Instance: "bench", OverLimitCacheSize: 100_000, Outcomes: pub},
		Coalesce: redisstore.CoalesceConfig{Wait: redisstore.DefaultWait, OnFlush: trips.flushed},
		Events:   pub, Registerer: reg,
	})
	cfg := httpapi.Config{Service: svc, Log: zap.NewNop()}
	return httpapi.NewFastHandler(cfg, ops.Beside(httpapi.NewHandler(cfg), ops.NewHandler(ops.Config{}))), trips
}

// roundTrips counts the coalescer's round trips and the calls they carry:
// allocations per round trip (context, pooled connection check, pipeline)
// are shared by its calls, so the allocations per decision depend on how
// many calls the load puts in one. With the pid of a Redis on this machine
// it also reports Redis's CPU per decision.
type roundTrips struct {
	trips, calls atomic.Int64
	redisPID     int // 0: unknown
	redisTicks   int64
}

func (r *roundTrips) flushed(calls int) { r.trips.Add(1); r.calls.Add(int64(calls)) }

func (r *roundTrips) reset() {
	r.trips.Store(0)
	r.calls.Store(0)
	r.redisTicks = procTicks(r.redisPID)
}

func (r *roundTrips) report(b *testing.B) {
	b.ReportMetric(float64(r.calls.Load())/float64(max(r.trips.Load(), 1)), "calls/roundtrip")
	if r.redisPID != 0 && r.calls.Load() > 0 {
		// Clock ticks of 10 ms: a run of a few seconds reads to 1 %.
		b.ReportMetric(float64(procTicks(r.redisPID)-r.redisTicks)*1e7/float64(r.calls.Load()), "redis-cpu-ns/call")
	}
}

// redisPID is the pid of rdb's server when it runs on this machine (its
// /proc entry is readable), else 0.
func redisPID(b *testing.B, rdb *redis.Client) int {
	info, err := rdb.Info(context.Background(), "server").Result()
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			if pid, err := strconv.Atoi(v); err == nil && procTicks(pid) >= 0 {
				return pid
			}
		}
	}
	return 0
}

// procTicks is the user and system CPU of process pid in clock ticks
// (1/100 s on Linux), or -1 when it cannot be read.
func procTicks(pid int) int64 {
	if pid == 0 {
		return -1
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return -1
	}
	// The command may hold spaces: the fields that follow it are counted
	// from its closing parenthesis. utime and stime are fields 14 and 15.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return -1
	}
	fields := strings.Fields(string(stat[i+1:]))
	if len(fields) < 13 {
		return -1
	}
	user, err1 := strconv.ParseInt(fields[11], 10, 64)
	sys, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	return user + sys
}

// BenchmarkServeFloor is BenchmarkServeCheck's client against a handler
// that reads the body and answers a fixed decision with the same headers:
// what the server costs by itself, fasthttp's (the decision port's) and
// net/http's for comparison.
func BenchmarkServeFloor(b *testing.B) {
	answer := []byte(`{"allowed":true,"reason":"ok","rule_id":"per-ip","algorithm":"sliding_window","limit":1000000,` +
		`"remaining":999999,"reset_after_ms":1000,"retry_after_ms":0,"mode":"redis","shadow":false,` +
		`"event_id":"0198f2a4-9c1e-7d2b-8e3f-4a5b6c7d8e9f"}` + "\n")
	header := map[string][]string{
		"Content-Type":          {"application/json"},
		"Cache-Control":         {"no-store"},
		"Ratelimit-Policy":      {`"per-ip/1s";q=1000000;w=1`},
		"Ratelimit":             {`"per-ip/1s";r=999999;t=1`},
		"X-Ratelimit-Limit":     {"1000000"},
		"X-Ratelimit-Remaining": {"999999"},
		"X-Ratelimit-Reset":     {"1"},
	}
	body := func(i int) string {
		return `{"ip":"10.1.` + strconv.Itoa(i/256%256) + `.` + strconv.Itoa(i%256) + `","endpoint":"/api/books/17","method":"GET"}`
	}
	b.Run("fasthttp", func(b *testing.B) {
		benchServe(b, &ops.Listener{Fast: func(ctx *fasthttp.RequestCtx) {
			_ = ctx.PostBody()
			for k, v := range header {
				ctx.Response.Header.Set(k, v[0])
			}
			ctx.SetBody(answer)
		}}, "/v1/check", nil, 1, body)
	})
	b.Run("net/http", func(b *testing.B) {
		bufs := sync.Pool{New: func() any { return new(bytes.Buffer) }}
		benchServe(b, &ops.Listener{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			buf := bufs.Get().(*bytes.Buffer)
			buf.Reset()
			_, _ = buf.ReadFrom(r.Body)
			bufs.Put(buf)
			wh := w.Header()
			for k, v := range header {
				wh[k] = v
			}
			_, _ = w.Write(answer)
		})}, "/v1/check", nil, 1, body)
	})
}

// benchServe serves l's handler on a loopback port as the limiter does and
// sends b.N POST requests to path over serveConns keep-alive connections,
// the bodies body(0), body(1), ... spread over them. trips, when set, is
// reported. With decisions > 1 per request (batches), the CPU and the
// allocations per decision are reported too.
func benchServe(b *testing.B, l *ops.Listener, path string, trips *roundTrips, decisions int, body func(i int) string) {
	addr := strings.TrimPrefix(serve(b, l), "http://")

	conns := make(chan *rawClient, serveConns)
	for c := range serveConns {
		rc, err := dialRaw(addr)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = rc.conn.Close() })
		// 64 requests per connection, distinct client IPs.
		for i := range 64 {
			rc.reqs = append(rc.reqs, buildPost(path, body(c*64+i)))
		}
		for range 100 { // warm-up: connections, pools, scripts, keys
			if err := rc.roundTrip(); err != nil {
				b.Fatal(err)
			}
		}
		conns <- rc
	}
	var failed atomic.Value
	if trips != nil {
		trips.reset()
		defer trips.report(b)
	}
	b.ReportAllocs()
	b.SetParallelism(serveConns / runtime.GOMAXPROCS(0))
	cpu := processCPU(b)
	var mem runtime.MemStats
	runtime.ReadMemStats(&mem)
	mallocs := mem.Mallocs
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		rc := <-conns
		defer func() { conns <- rc }()
		for pb.Next() {
			if err := rc.roundTrip(); err != nil {
				failed.Store(err)
				return
			}
		}
	})
	b.StopTimer()
	used := float64(processCPU(b) - cpu)
	b.ReportMetric(used/float64(b.N), "cpu-ns/op")
	if decisions > 1 {
		runtime.ReadMemStats(&mem)
		n := float64(b.N * decisions)
		b.ReportMetric(used/n, "cpu-ns/decision")
		b.ReportMetric(float64(mem.Mallocs-mallocs)/n, "allocs/decision")
	}
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
}

// processCPU is the CPU time (user and system) the process has used, in
// nanoseconds: server, client and Redis client alike, so only differences
// between runs of one benchmark mean something.
func processCPU(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// rawClient is one keep-alive HTTP/1.1 connection sending prebuilt
// requests in turn, reading the answers through its own buffer: it
// allocates nothing per request.
type rawClient struct {
	conn net.Conn
	r    *bufio.Reader
	reqs [][]byte
	next int
}

func dialRaw(addr string) (*rawClient, error) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &rawClient{conn: conn, r: bufio.NewReaderSize(conn, 8192)}, nil
}

func buildPost(path, body string) []byte {
	return []byte("POST " + path + " HTTP/1.1\r\nHost: limiter\r\nContent-Type: application/json\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
}

var errNotOK = errors.New("answer other than 200")

// roundTrip sends the next request and reads its answer, which must be 200
// with a Content-Length.
func (c *rawClient) roundTrip() error {
	req := c.reqs[c.next]
	c.next = (c.next + 1) % len(c.reqs)
	if _, err := c.conn.Write(req); err != nil {
		return err
	}
	line, err := c.r.ReadSlice('\n')
	if err != nil {
		return err
	}
	if !bytes.HasPrefix(line, []byte("HTTP/1.1 200 ")) {
		return fmt.Errorf("%w: %q", errNotOK, line)
	}
	length := -1
	for {
		line, err := c.r.ReadSlice('\n')
		if err != nil {
			return err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		if name, value, ok := bytes.Cut(line, []byte(":")); ok && bytes.EqualFold(name, []byte("Content-Length")) {
			n, err := strconv.Atoi(string(bytes.TrimSpace(value)))
			if err != nil {
				return err
			}
			length = n
		}
	}
	if length < 0 {
		return errors.New("answer without Content-Length")
	}
	_, err = c.r.Discard(length)
	return err
}

// plainRedis is a client of the test Redis without redistest's hook, whose
// checks allocate on every command.
func plainRedis(b *testing.B) *redis.Client {
	opts, err := redis.ParseURL(redistest.RequiredURL(b))
	if err != nil {
		b.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		b.Fatalf("redis: %v", err)
	}
	b.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// benchPublisher is a Kafka producer to BENCH_KAFKA_BROKERS, or else a
// publisher that counts and drops.
func benchPublisher(b *testing.B, reg prometheus.Registerer) limiter.Publisher {
	brokers := os.Getenv("BENCH_KAFKA_BROKERS")
	if brokers == "" {
		return &droppingPublisher{}
	}
	p, err := kafkabus.NewProducer(kafkabus.ProducerConfig{Brokers: strings.Split(brokers, ","), Topic: topic, QueueSize: 100_000},
		zap.NewNop(), reg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = p.Close(ctx)
	})
	return p
}

type droppingPublisher struct{ n atomic.Int64 }

func (p *droppingPublisher) Publish(_, _ []byte) bool { p.n.Add(1); return true }
