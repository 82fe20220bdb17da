package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ratewarden/ratewarden/client"
	"github.com/ratewarden/ratewarden/client/rlgrpc"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/kafkatest"
)

// hourRulesYAML allows 3 requests an hour per address on /api/**.
const (
	hourLimit     = 3
	hourRulesYAML = `
rules:
  - id: per-ip-hour
    match: {endpoints: ["/api/**"]}
    key: [ip]
    algorithm: sliding_window
    limits: [{requests: 3, per: 1h}]
`
)

// loopback is the trusted proxy of the applications below: the tests name
// the client in X-Forwarded-For (x-forwarded-for metadata for gRPC).
var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}

// spendAndBan spends ip's hourly budget through c, then bans it by hand:
// from then on, every decision on ip is a refusal.
func spendAndBan(t *testing.T, lim *proc, c *client.Client, ip string) {
	t.Helper()
	for i := range hourLimit {
		if d, err := c.Check(context.Background(), &client.Request{IP: ip, Endpoint: "/api/books/1"}); err != nil || !d.Allowed {
			t.Fatalf("check %d of %s: %+v, %v", i+1, ip, d, err)
		}
	}
	if code, body := admin(t, lim, "POST", "/v1/admin/bans", adminToken,
		`{"scope":"ip","subject":"`+ip+`","duration":"1h","reason":"client test"}`); code != http.StatusCreated {
		t.Fatalf("ban: %d %s", code, body)
	}
}

// halfClosedGet sends GET path from the client named forwardedFor, then
// half-closes the connection (the client sends nothing more, which
// net/http takes for a client gone and cancels the request's context), and
// returns the status of the answer it still reads.
func halfClosedGet(t *testing.T, addr, path, forwardedFor string) int {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: app\r\nX-Forwarded-For: %s\r\n\r\n", path, forwardedFor); err != nil {
		t.Fatal(err)
	}
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// A client banned and over its limit sends GET and half-closes its
// connection; the work in front of the middleware (a session lookup) ends
// after net/http has cancelled the request's context. The limiter still
// decides each request, and none reaches the handler.
func TestClientHalfClosedRequestIsDecided(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, hourRulesYAML)
	lim := e.start("limiter")
	c := newClient(t, client.Config{URL: "http://" + lim.addr}) // FailOpen
	const ip = "198.51.100.30"
	spendAndBan(t, lim, c, ip)

	var served, cancelled atomic.Int64
	limited := client.Middleware(c, client.MiddlewareConfig{TrustedProxies: loopback})(
		http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served.Add(1) }))
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select { // the session lookup, which outlasts the client
		case <-r.Context().Done():
			cancelled.Add(1)
		case <-time.After(5 * time.Second):
		}
		limited.ServeHTTP(w, r)
	}))
	defer app.Close()

	const n = 100
	statuses := map[int]int{}
	for range n {
		statuses[halfClosedGet(t, app.Listener.Addr().String(), "/api/books/1", ip)]++
	}
	t.Logf("%d of %d half-closed requests served; %d had their context cancelled before the check; answers %v",
		served.Load(), n, cancelled.Load(), statuses)
	if cancelled.Load() == 0 {
		t.Fatal("no request context was cancelled: the half-close was not seen")
	}
	if served.Load() != 0 || statuses[http.StatusForbidden] != n {
		t.Fatalf("%d of %d requests of a banned client served (answers %v), want none, each answered 403", served.Load(), n, statuses)
	}
}

// gRPC calls of a banned client with 200 µs deadlines: each reaches the
// interceptor with its deadline passed (an interceptor in front waits for
// it), and none reaches the handler.
func TestClientGRPCExpiredDeadlineIsDecided(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, hourRulesYAML)
	lim := e.start("limiter")
	c := newClient(t, client.Config{URL: "http://" + lim.addr}) // FailOpen
	const ip = "198.51.100.31"
	spendAndBan(t, lim, c, ip)

	var arrived, reached atomic.Int64
	expire := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		arrived.Add(1)
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
		}
		return handler(ctx, req)
	}
	count := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		reached.Add(1)
		return handler(ctx, req)
	}
	conn := serveGRPCHealth(t, grpc.ChainUnaryInterceptor(expire,
		rlgrpc.UnaryServerInterceptor(c, rlgrpc.Config{TrustedProxies: loopback}), count))
	hc := healthpb.NewHealthClient(conn)
	if _, err := hc.Check(metadata.AppendToOutgoingContext(context.Background(), "x-forwarded-for", "198.51.100.32"),
		&healthpb.HealthCheckRequest{}); err != nil { // connects, and shows the handler is reached
		t.Fatal(err)
	}
	arrived.Store(0)
	reached.Store(0)
	const n = 100
	for range n {
		ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "x-forwarded-for", ip), 200*time.Microsecond)
		_, _ = hc.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
	}
	testkit.WaitFor(t, 10*time.Second, "the calls that arrived to be decided", func() bool {
		return int64(c.Stats().Checks) >= hourLimit+1+arrived.Load()
	})
	t.Logf("%d of %d calls with a 200 µs deadline arrived, %d reached the handler; stats %+v", arrived.Load(), n, reached.Load(), c.Stats())
	if arrived.Load() == 0 {
		t.Fatal("no call arrived before its deadline: nothing was tested")
	}
	if reached.Load() != 0 {
		t.Fatalf("%d calls of a banned client reached the handler, want none", reached.Load())
	}
}

// serveGRPCHealth serves grpc's health service with opts and returns a
// connection to it.
func serveGRPCHealth(t *testing.T, opts ...grpc.ServerOption) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(opts...)
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(s, hs)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// One caller loops on checks with 50 µs deadlines (shorter than a round
// trip) beside 200 normal checks of a banned client and of an innocent one,
// and their outcome reports: the short deadlines never open the breaker,
// so under FailOpen no check of the banned client is allowed, under
// FailClosed no check of the innocent one is refused, and every report is
// sent.
func TestClientShortDeadlinesDoNotOpenTheBreaker(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, hourRulesYAML)
	lim := e.start("limiter")
	for _, tc := range []struct {
		name                      string
		policy                    client.FailurePolicy
		banned, hurried, innocent string
	}{
		{"FailOpen", client.FailOpen, "198.51.100.33", "198.51.100.34", "198.51.100.35"},
		{"FailClosed", client.FailClosed, "198.51.100.36", "198.51.100.37", "198.51.100.38"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, client.Config{URL: "http://" + lim.addr, OnFailure: tc.policy}) // 5 failures open the breaker
			spendAndBan(t, lim, c, tc.banned)
			stop := make(chan struct{})
			var loops atomic.Int64
			var wg sync.WaitGroup
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					ctx, cancel := context.WithTimeout(context.Background(), 50*time.Microsecond)
					_, _ = c.Check(ctx, &client.Request{IP: tc.hurried, Endpoint: "/elsewhere"})
					cancel()
					loops.Add(1)
				}
			})
			testkit.WaitFor(t, 10*time.Second, "the hurried caller to loop", func() bool { return loops.Load() >= 20 })
			const n = 200
			bannedAllowed, innocentRefused := 0, 0
			for range n {
				if d, _ := c.Check(context.Background(), &client.Request{IP: tc.banned, Endpoint: "/api/books/1"}); d.Allowed {
					bannedAllowed++
				}
				if d, _ := c.Check(context.Background(), &client.Request{IP: tc.innocent, Endpoint: "/elsewhere"}); !d.Allowed {
					innocentRefused++
				}
				c.ReportAsync(&client.Outcome{IP: tc.banned, Endpoint: "/api/books/1", Method: "GET", Status: 200})
			}
			close(stop)
			wg.Wait()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := c.Close(ctx); err != nil {
				t.Fatal(err)
			}
			s := c.Stats()
			t.Logf("%d hurried checks; of %d checks each, the banned client's allowed %d, the innocent one's refused %d; stats %+v",
				loops.Load(), n, bannedAllowed, innocentRefused, s)
			if bannedAllowed != 0 || innocentRefused != 0 || s.BreakerOpen != 0 || s.ReportsSent != n || s.ReportsFailed != 0 || s.ReportsDropped != 0 {
				t.Fatalf("banned allowed %d, innocent refused %d of %d, stats %+v: want none, the breaker never open, every report sent",
					bannedAllowed, innocentRefused, n, s)
			}
		})
	}
}

// Paths the limiter refused (a NUL, a line feed, a byte that is not UTF-8,
// over 8 KiB) and a user id, tier and attribute it refused (control
// characters, too long), through the middleware: the limiter decides each
// request, 3 of 10 over a limit of 3 an hour, none of a banned client, and
// leaves the decision and outcome events the detector reads.
func TestClientHostileInputIsDecided(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, hourRulesYAML)
	lim := e.start("limiter")
	c := newClient(t, client.Config{URL: "http://" + lim.addr}) // FailOpen
	const ip, banned = "198.51.100.40", "198.51.100.41"
	if code, body := admin(t, lim, "POST", "/v1/admin/bans", adminToken,
		`{"scope":"ip","subject":"`+banned+`","duration":"1h","reason":"client test"}`); code != http.StatusCreated {
		t.Fatalf("ban: %d %s", code, body)
	}
	var served atomic.Int64
	limited := client.Middleware(c, client.MiddlewareConfig{
		TrustedProxies: loopback,
		User:           func(*http.Request) string { return "mallory\x00\n\xff" + strings.Repeat("u", 600) },
		Tier:           func(*http.Request) string { return "gold\x1b" + strings.Repeat("t", 100) },
		Attributes: func(*http.Request) map[string]string {
			return map[string]string{"api_key": "k\x00" + strings.Repeat("v", 2000)}
		},
	})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served.Add(1) }))
	app := httptest.NewServer(limited)
	defer app.Close()

	long := "/api/" + strings.Repeat("x", 9000)
	paths := []string{"/api/a%00", "/api/a%0a", "/api/a%ff", long}
	get := func(path, client string) int {
		req, _ := http.NewRequest(http.MethodGet, app.URL+path, nil)
		req.Header.Set("X-Forwarded-For", client)
		resp, err := app.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	statuses := map[int]int{}
	for i := range 10 {
		statuses[get(paths[i%len(paths)], ip)]++
	}
	t.Logf("over the limit: %d of 10 served, answers %v", served.Load(), statuses)
	if served.Load() != hourLimit || statuses[http.StatusOK] != hourLimit || statuses[http.StatusTooManyRequests] != 10-hourLimit {
		t.Fatalf("%d of 10 requests served (answers %v), want %d, the rest 429", served.Load(), statuses, hourLimit)
	}
	served.Store(0)
	clear(statuses)
	for i := range 5 {
		statuses[get(paths[i%len(paths)], banned)]++
	}
	t.Logf("banned: %d of 5 served, answers %v", served.Load(), statuses)
	if served.Load() != 0 || statuses[http.StatusForbidden] != 5 {
		t.Fatalf("banned: %d of 5 requests served (answers %v), want none, each 403", served.Load(), statuses)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// The limiter decided all 15: their events carry the paths escaped as
	// the rate limit API escapes them, the long one cut and marked.
	endpoints := map[string]int{}
	for _, m := range kafkatest.ReadMessages(t, e.broker.Brokers(), decisionsTopic, 15, 15*time.Second) {
		d, err := event.DecodeDecision(m.Value)
		if err != nil {
			t.Fatalf("decision event %s: %v", m.Value, err)
		}
		if d.IP != ip && d.IP != banned {
			t.Fatalf("decision of nobody's: %+v", d)
		}
		ep := d.Endpoint
		if strings.HasPrefix(ep, "/api/xxxx") {
			if len(ep) > event.MaxEndpoint {
				t.Fatalf("long endpoint of %d bytes, over %d", len(ep), event.MaxEndpoint)
			}
			ep = "long"
		}
		endpoints[ep]++
	}
	want := map[string]int{"/api/a%00": 5, "/api/a%0A": 4, "/api/a%FF": 3, "long": 3} // paths[i%4] of 10 requests, then of 5
	if fmt.Sprint(endpoints) != fmt.Sprint(want) {
		t.Fatalf("decision events by endpoint %v, want %v", endpoints, want)
	}
	for _, o := range outcomes(t, e, hourLimit) {
		if o.IP != ip || o.Status != http.StatusOK {
			t.Fatalf("outcome %+v", o)
		}
	}
}

// One HTTP/2 connection carries many requests at once (up to 250 streams
// with net/http's server): a banned client sends 40 at a time, more than
// the client has connections to the limiter (MaxConns 4 here, 64 by
// default), beside an innocent client. A check that finds every
// connection busy waits for one within the client's Timeout: it is
// decided, so under FailOpen no request of the banned client is served,
// under FailClosed none of the innocent one is refused, and the breaker
// never opens.
func TestClientMoreRequestsThanConnectionsAreDecided(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, hourRulesYAML)
	lim := e.start("limiter")
	for _, tc := range []struct {
		name             string
		policy           client.FailurePolicy
		banned, innocent string
	}{
		{"FailOpen", client.FailOpen, "198.51.100.50", "198.51.100.51"},
		{"FailClosed", client.FailClosed, "198.51.100.52", "198.51.100.53"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A Timeout no round trip on this busy machine outlasts: a
			// check waits for a connection, never fails for want of one.
			c := newClient(t, client.Config{URL: "http://" + lim.addr, OnFailure: tc.policy, MaxConns: 4, Timeout: 10 * time.Second})
			spendAndBan(t, lim, c, tc.banned)
			var bannedServed, innocentServed atomic.Int64
			app := httptest.NewUnstartedServer(client.Middleware(c, client.MiddlewareConfig{TrustedProxies: loopback})(
				http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
					if r.Header.Get("X-Forwarded-For") == tc.banned {
						bannedServed.Add(1)
					} else {
						innocentServed.Add(1)
					}
				})))
			app.EnableHTTP2 = true
			app.StartTLS()
			defer app.Close()
			hc := app.Client()
			get := func(ip string) int {
				req, _ := http.NewRequest(http.MethodGet, app.URL+"/elsewhere", nil)
				req.Header.Set("X-Forwarded-For", ip)
				resp, err := hc.Do(req)
				if err != nil {
					t.Error(err)
					return 0
				}
				resp.Body.Close()
				if resp.ProtoMajor != 2 {
					t.Errorf("answered over %s, want HTTP/2", resp.Proto)
				}
				return resp.StatusCode
			}
			const callers, each = 40, 10
			var mu sync.Mutex
			statuses := map[string]map[int]int{tc.banned: {}, tc.innocent: {}}
			var wg sync.WaitGroup
			for i := range callers {
				ip := tc.banned
				if i%4 == 0 {
					ip = tc.innocent
				}
				wg.Go(func() {
					for range each {
						code := get(ip)
						mu.Lock()
						statuses[ip][code]++
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			s := c.Stats()
			t.Logf("banned: %d served, answers %v; innocent: %d served, answers %v; stats %+v",
				bannedServed.Load(), statuses[tc.banned], innocentServed.Load(), statuses[tc.innocent], s)
			const innocentN = callers / 4 * each
			if bannedServed.Load() != 0 || innocentServed.Load() != innocentN || s.Fallbacks != 0 || s.BreakerOpen != 0 {
				t.Fatalf("%d requests of the banned client served, %d of %d of the innocent one, stats %+v: want none, all, no fallback, the breaker never open",
					bannedServed.Load(), innocentServed.Load(), innocentN, s)
			}
		})
	}
}

// A client of a gRPC service floods it, on one connection, with calls
// whose deadline (1 ms) passes while their check waits for one of the
// client's connections to the limiter (MaxConns 2 here), leaving each at
// once; the server goes on with the interceptor after the caller has
// gone. Such a check stops waiting when its caller goes: were it to wait
// for the client's Timeout, the flood would hold a queue longer than
// Timeout, the checks of every caller would time out, and the breaker
// would open. Beside the flood, no call of a banned client reaches the
// handler, none of an innocent one is refused, and the breaker never
// opens.
func TestClientAbandonedChecksDoNotQueue(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, hourRulesYAML)
	lim := e.start("limiter")
	for _, tc := range []struct {
		name                      string
		policy                    client.FailurePolicy
		banned, hurried, innocent string
	}{
		{"FailOpen", client.FailOpen, "198.51.100.60", "198.51.100.61", "198.51.100.62"},
		{"FailClosed", client.FailClosed, "198.51.100.63", "198.51.100.64", "198.51.100.65"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, client.Config{URL: "http://" + lim.addr, OnFailure: tc.policy, MaxConns: 2, Timeout: time.Second})
			spendAndBan(t, lim, c, tc.banned)
			var mu sync.Mutex
			reached := map[string]int{}
			count := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
				ip := metadata.ValueFromIncomingContext(ctx, "x-forwarded-for")
				mu.Lock()
				reached[ip[0]]++
				mu.Unlock()
				return handler(ctx, req)
			}
			hc := healthpb.NewHealthClient(serveGRPCHealth(t, grpc.ChainUnaryInterceptor(
				rlgrpc.UnaryServerInterceptor(c, rlgrpc.Config{TrustedProxies: loopback}), count)))
			call := func(ip string, deadline time.Duration) error {
				ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "x-forwarded-for", ip), deadline)
				defer cancel()
				_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
				return err
			}
			stop := make(chan struct{})
			var flood atomic.Int64
			var wg sync.WaitGroup
			for range 16 {
				wg.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
						_ = call(tc.hurried, time.Millisecond)
						flood.Add(1)
					}
				})
			}
			testkit.WaitFor(t, 10*time.Second, "the flood to start", func() bool { return flood.Load() >= 1000 })
			const n = 100
			bannedErrs, innocentErrs := map[string]int{}, map[string]int{}
			for range n {
				bannedErrs[status.Code(call(tc.banned, time.Minute)).String()]++
				innocentErrs[status.Code(call(tc.innocent, time.Minute)).String()]++
			}
			close(stop)
			wg.Wait()
			s := c.Stats()
			mu.Lock()
			defer mu.Unlock()
			t.Logf("%d calls of 1 ms; banned: %d reached the handler, codes %v; innocent: %d reached, codes %v; stats %+v",
				flood.Load(), reached[tc.banned], bannedErrs, reached[tc.innocent], innocentErrs, s)
			if reached[tc.banned] != 0 || reached[tc.innocent] != n || s.BreakerOpen != 0 || s.Fallbacks != 0 {
				t.Fatalf("%d calls of the banned client reached the handler, %d of %d of the innocent one, stats %+v: want none, all, no fallback, the breaker never open",
					reached[tc.banned], reached[tc.innocent], n, s)
			}
		})
	}
}
