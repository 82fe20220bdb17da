package rlsapi_test

import (
	"context"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratewarden/ratewarden/internal/kafkabus"
	"github.com/ratewarden/ratewarden/internal/limiter"
	"github.com/ratewarden/ratewarden/internal/redisstore"
	"github.com/ratewarden/ratewarden/internal/rlsapi"
	"github.com/ratewarden/ratewarden/internal/rules"
	"github.com/ratewarden/ratewarden/internal/testkit/limitertest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// The Serve benchmarks measure what one decision costs on the gRPC path:
// ShouldRateLimit served by rlsapi.GRPCServer on a loopback listener, as
// cmd/limiter serves it, decided on the real local Redis through the
// coalescer, events encoded and handed to the publisher; a real gRPC
// client, one remote_address descriptor per call as loadgen -protocol grpc
// sends. allocs/op counts the whole process, and grpc-go's client
// allocates per call too: BenchmarkServeGRPCFloor, the same client against
// a service that answers a fixed response, is grpc-go's own cost (client
// and server), and the difference between the two is the decision's.
//
//	go test -run '^$' -bench '^BenchmarkServe' -benchtime 20000x -count 3 ./internal/rlsapi/
//
// Events go to a publisher that drops them unless BENCH_KAFKA_BROKERS names
// a broker in another process.

// serveCallers is the number of concurrent callers, over serveConns
// connections.
const (
	serveCallers = 32
	serveConns   = 4
)

func BenchmarkServeShouldRateLimit(b *testing.B) {
	rdb := plainRedis(b)
	r := rule("per-ip", "bench", 1_000_000, time.Second, "remote_address", "")
	r.Algorithm = "sliding_window"
	set, err := rules.Compile(&rules.File{Rules: []rules.Rule{r}}, rules.Options{KeyPrefix: redistest.Prefix(b, rdb)})
	if err != nil {
		b.Fatal(err)
	}
	var trips, calls atomic.Int64
	reg := prometheus.NewRegistry()
	svc := limitertest.Service(b, redisstore.New(rdb), set, limitertest.Options{
		Limiter: limiter.Config{Instance: "bench", OverLimitCacheSize: 100_000},
		Coalesce: redisstore.CoalesceConfig{Wait: redisstore.DefaultWait,
			OnFlush: func(n int) { trips.Add(1); calls.Add(int64(n)) }},
		Events: benchPublisher(b, reg), Registerer: reg,
	})
	benchGRPC(b, rlsapi.New(rlsapi.Config{}, svc, zap.NewNop(), reg).GRPCServer(rlsapi.ServerOptions{}), func() {
		trips.Store(0)
		calls.Store(0)
	})
	// Allocations per round trip are shared by its calls: how many the load
	// puts in one moves the allocations per decision.
	b.ReportMetric(float64(calls.Load())/float64(max(trips.Load(), 1)), "calls/roundtrip")
}

// BenchmarkServeGRPCFloor is BenchmarkServeShouldRateLimit's client against
// a service answering a fixed response of the same shape.
func BenchmarkServeGRPCFloor(b *testing.B) {
	g := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(g, fixedAnswer{})
	benchGRPC(b, g, func() {})
}

type fixedAnswer struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

// fixedResponse has the shape of the decisions' answers, so that the client
// decodes the same messages.
var fixedResponse = &rlsv3.RateLimitResponse{OverallCode: ok, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{
	Code: ok, CurrentLimit: limitOf("", 1_000_000, second), LimitRemaining: 999_999,
	DurationUntilReset: durationpb.New(time.Second),
}}}

func (fixedAnswer) ShouldRateLimit(context.Context, *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	return fixedResponse, nil
}

// benchGRPC serves g and sends b.N ShouldRateLimit calls from serveCallers
// goroutines, each reusing its request and response messages; start is
// called when the measured calls start.
func benchGRPC(b *testing.B, g *grpc.Server, start func()) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = g.Serve(ln) }()
	b.Cleanup(g.Stop)
	var conns [serveConns]*grpc.ClientConn
	for i := range conns {
		conn, err := grpc.NewClient("passthrough:///"+ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = conn.Close() })
		conns[i] = conn
	}
	type caller struct {
		conn *grpc.ClientConn
		reqs []*rlsv3.RateLimitRequest
		res  rlsv3.RateLimitResponse
		next int
	}
	callers := make(chan *caller, serveCallers)
	ctx := context.Background()
	for c := range serveCallers {
		cl := &caller{conn: conns[c%serveConns]}
		for i := range 64 { // distinct client addresses
			n := c*64 + i
			cl.reqs = append(cl.reqs, &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
				Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.1." + strconv.Itoa(n/256%256) + "." + strconv.Itoa(n%256)}},
			}}})
		}
		for i := range 100 { // warm-up: connections, pools, scripts, keys
			if err := cl.conn.Invoke(ctx, rlsv3.RateLimitService_ShouldRateLimit_FullMethodName, cl.reqs[i%64], &cl.res); err != nil {
				b.Fatal(err)
			}
		}
		callers <- cl
	}
	var failed atomic.Value
	start()
	b.ReportAllocs()
	b.SetParallelism(serveCallers / runtime.GOMAXPROCS(0))
	cpu := processCPU(b)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		cl := <-callers
		defer func() { callers <- cl }()
		for pb.Next() {
			req := cl.reqs[cl.next]
			cl.next = (cl.next + 1) % len(cl.reqs)
			if err := cl.conn.Invoke(ctx, rlsv3.RateLimitService_ShouldRateLimit_FullMethodName, req, &cl.res); err != nil {
				failed.Store(err)
				return
			}
			if cl.res.OverallCode != ok {
				failed.Store(&unexpected{cl.res.OverallCode})
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(processCPU(b)-cpu)/float64(b.N), "cpu-ns/op")
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

type unexpected struct{ code rlsv3.RateLimitResponse_Code }

func (u *unexpected) Error() string { return "overall code " + u.code.String() }

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
	p, err := kafkabus.NewProducer(kafkabus.ProducerConfig{Brokers: strings.Split(brokers, ","), Topic: "ratelimit.decisions", QueueSize: 100_000},
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
