package rlsapi_test

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratewarden/ratewarden/internal/bearer"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/limiter"
	"github.com/ratewarden/ratewarden/internal/redisstore"
	"github.com/ratewarden/ratewarden/internal/rlsapi"
	"github.com/ratewarden/ratewarden/internal/rules"
	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/limitertest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// env is one limiter instance serving Envoy's rate limit API on loopback:
// gRPC on a real listener with a real client, POST /json on an HTTP test
// server, decided by a limiter.Service on the real local Redis.
type env struct {
	t      *testing.T
	srv    *rlsapi.Server
	svc    *limiter.Service
	grpc   *grpc.Server
	addr   string
	conn   *grpc.ClientConn
	client rlsv3.RateLimitServiceClient
	reg    *prometheus.Registry
	events *capture
	// token, when set, is sent with every call of env.call and env.post.
	token string
}

type options struct {
	cfg rlsapi.Config
	// tokens, when any, make the gate of cfg (API_TOKENS).
	tokens  []string
	limiter limiter.Config
	server  rlsapi.ServerOptions
	exempt  rules.Exempt
	// redis replaces the local test Redis (an unreachable one, say).
	redis redis.UniversalClient
	// clientTLS, when set, is the client's TLS configuration.
	clientTLS *tls.Config
	// bans, when set, is called with the registry to build limiter.Config.Bans.
	bans func(prometheus.Registerer) *limiter.BanSet
	// maxConns bounds the listener's connections (0: the default).
	maxConns int
}

func newEnv(t *testing.T, rs []rules.Rule, o options) *env {
	t.Helper()
	// The tests' windows of an hour or a day end on an hour's end: a window
	// ending between two calls of a test would reset the counts it expects.
	// The few that count in minute windows guard those themselves.
	testkit.AvoidHourEnd(t)
	rdb, prefix := o.redis, "rwtest:unreachable:"
	if rdb == nil {
		c := redistest.Client(t)
		rdb, prefix = c, redistest.Prefix(t, c)
	}
	set, err := rules.Compile(&rules.File{Rules: rs, Exempt: o.exempt}, rules.Options{KeyPrefix: prefix})
	if err != nil {
		t.Fatalf("rules: %v", err)
	}
	reg := prometheus.NewRegistry()
	events := &capture{}
	lcfg := o.limiter
	lcfg.Instance = "test"
	if o.bans != nil {
		lcfg.Bans = o.bans(reg)
	}
	svc := limitertest.Service(t, redisstore.New(rdb), set, limitertest.Options{
		Limiter: lcfg, Coalesce: redisstore.CoalesceConfig{Timeout: 5 * time.Second}, Events: events, Registerer: reg,
	})
	if len(o.tokens) > 0 {
		o.cfg.Gate = bearer.NewGate("decisions", "ratewarden", o.tokens, zap.NewNop(), reg)
	}
	srv := rlsapi.New(o.cfg, svc, zap.NewNop(), reg)
	g := srv.GRPCServer(o.server)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(srv.Listener(ln, o.maxConns)) }()
	t.Cleanup(g.Stop)
	e := &env{t: t, srv: srv, svc: svc, grpc: g, addr: ln.Addr().String(), reg: reg, events: events}
	e.conn = e.dial(o.clientTLS)
	e.client = rlsv3.NewRateLimitServiceClient(e.conn)
	return e
}

// dial returns a new client connection to the gRPC server.
func (e *env) dial(tlsConfig *tls.Config) *grpc.ClientConn {
	e.t.Helper()
	creds := insecure.NewCredentials()
	if tlsConfig != nil {
		creds = credentials.NewTLS(tlsConfig)
	}
	conn, err := grpc.NewClient("passthrough:///"+e.addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func (e *env) ctx() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	if e.token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+e.token)
	}
	return ctx, cancel
}

// call sends a ShouldRateLimit call.
func (e *env) call(req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	ctx, cancel := e.ctx()
	defer cancel()
	return e.client.ShouldRateLimit(ctx, req)
}

// mustCall sends a call that must succeed.
func (e *env) mustCall(req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	e.t.Helper()
	resp, err := e.call(req)
	if err != nil {
		e.t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp
}

// postJSON answers body as POST /json does (the decision port checks the
// method, token and size first: package httpapi's tests) and returns the
// status and answer.
func (e *env) postJSON(body string) (int, string) {
	e.t.Helper()
	code, answer := e.srv.AnswerJSON(context.Background(), []byte(body))
	return code, string(answer)
}

// metric sums the samples of the family name whose labels include want
// (testkit.MetricSum on the stack's registry).
func (e *env) metric(name string, want map[string]string) float64 {
	e.t.Helper()
	return testkit.MetricSum(e.t, e.reg, name, want)
}

func (e *env) wantMetric(name string, labels map[string]string, want float64) {
	e.t.Helper()
	if got := e.metric(name, labels); got != want {
		e.t.Errorf("%s%v = %v, want %v", name, labels, got, want)
	}
}

// capture is the limiter's event publisher: it keeps the events.
type capture struct {
	mu     sync.Mutex
	events [][]byte
}

func (c *capture) Publish(_, value []byte) bool {
	c.mu.Lock()
	c.events = append(c.events, value)
	c.mu.Unlock()
	return true
}

// last decodes the last event.
func (c *capture) last(t *testing.T) event.Decision {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.events) == 0 {
		t.Fatal("no event")
	}
	d, err := event.DecodeDecision(c.events[len(c.events)-1])
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func (c *capture) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.events)
}

type ratelimitDescriptor = ratelimitv3.RateLimitDescriptor

// request builds a RateLimitRequest of domain with descriptors.
func request(domain string, descs ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: descs}
}

// desc builds a descriptor of key, value pairs.
func desc(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// hits sets d's hits_addend.
func hits(d *ratelimitv3.RateLimitDescriptor, n uint64) *ratelimitv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

// rule is a fixed window descriptor rule of domain with entries given as
// key, value pairs (an empty value: any value).
func rule(id, domain string, requests int64, per time.Duration, kv ...string) rules.Rule {
	r := rules.Rule{ID: id, Algorithm: "fixed_window",
		Limits:     []rules.Limit{{Requests: requests, Per: rules.Duration(per)}},
		Descriptor: &rules.DescriptorMatch{Domain: domain}}
	for i := 0; i+1 < len(kv); i += 2 {
		r.Descriptor.Entries = append(r.Descriptor.Entries, rules.DescriptorEntry{Key: kv[i], Value: kv[i+1]})
	}
	return r
}
