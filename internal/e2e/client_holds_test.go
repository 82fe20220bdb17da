package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ratewarden/ratewarden/client"
	"github.com/ratewarden/ratewarden/client/rlgrpc"
	"github.com/ratewarden/ratewarden/internal/testkit"
)

// holdRulesYAML lets 2 requests per address be in flight on /api/** and on
// grpc's health service, with holds that outlive any test: a slot is free
// again only when a release reaches the limiter. Beside it, a rule spent by
// the reports of 403s, 1 an hour: a single unit debited from it refuses
// every later check of the address.
const (
	holdSlots     = 2
	holdRulesYAML = `
rules:
  - id: two-in-flight
    match: {endpoints: ["/api/**", "/grpc.health.v1.Health/**"]}
    key: [ip]
    algorithm: concurrency
    limits: [{concurrent: 2, hold: 1h}]
  - id: forbidden-per-hour
    match: {endpoints: ["/api/**"]}
    key: [ip]
    algorithm: sliding_window
    spent_by: report
    statuses: [403]
    limits: [{requests: 1, per: 1h}]
`
)

// slots watches the handlers of an application under a concurrency rule:
// how many entered, how many are in at once, and the gate a blocking
// handler waits for.
type slots struct {
	entered  atomic.Int64
	in, most atomic.Int64
	gate     atomic.Pointer[chan struct{}]
}

func newSlots() *slots {
	s := &slots{}
	s.shut()
	s.open() // no handler blocks until a burst shuts the gate
	return s
}

// enter records a handler entering.
func (s *slots) enter() {
	s.entered.Add(1)
	n := s.in.Add(1)
	for m := s.most.Load(); n > m && !s.most.CompareAndSwap(m, n); m = s.most.Load() {
	}
}

func (s *slots) leave() { s.in.Add(-1) }

// block waits for the gate, or for done (the client went away); it
// reports whether the gate opened.
func (s *slots) block(done <-chan struct{}) bool {
	select {
	case <-*s.gate.Load():
		return true
	case <-done:
		return false
	}
}

// shut sets a new gate, which stays shut until open.
func (s *slots) shut() { g := make(chan struct{}); s.gate.Store(&g) }

// open opens the gate shut last: the handlers blocked on it return.
func (s *slots) open() { close(*s.gate.Load()) }

// burst makes n calls at once, each blocking in its handler while admitted,
// until every one is in its handler or refused; then lets the handlers
// return and waits for the client to have sent their releases. It returns
// how many were admitted and refused, and fails the test when the handlers
// in flight ever exceeded the rule's slots. call reports whether the call
// was refused, or its error when it ended otherwise than admitted or
// refused.
func burst(t *testing.T, s *slots, c *client.Client, n int, call func() (refused bool, err error)) (admitted, refused int) {
	t.Helper()
	s.shut()
	s.most.Store(0)
	entered, sent := s.entered.Load(), c.Stats().HoldsSent
	var refusals atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			r, err := call()
			if err != nil {
				errs <- err
			}
			if r {
				refusals.Add(1)
			}
		})
	}
	testkit.WaitFor(t, 30*time.Second, "every call admitted or refused", func() bool {
		return s.entered.Load()-entered+refusals.Load() >= int64(n)
	})
	admitted, refused = int(s.entered.Load()-entered), int(refusals.Load())
	s.open()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if most := s.most.Load(); most > holdSlots {
		t.Errorf("%d handlers in flight at once, want at most %d", most, holdSlots)
	}
	awaitReleases(t, c, sent+uint64(admitted))
	return admitted, refused
}

// awaitReleases waits until the client has sent want releases, none lost.
func awaitReleases(t *testing.T, c *client.Client, want uint64) {
	t.Helper()
	testkit.WaitFor(t, 30*time.Second, fmt.Sprintf("%d releases sent", want), func() bool {
		s := c.Stats()
		return s.HoldsSent >= want || s.HoldsLost > 0
	})
	if s := c.Stats(); s.HoldsSent != want || s.HoldsLost != 0 {
		t.Fatalf("releases: %d sent, %d lost; want %d sent, none lost (stats %+v)", s.HoldsSent, s.HoldsLost, want, s)
	}
}

// wantFree checks that exactly the rule's slots are free: of holdSlots+1
// calls at once, holdSlots are admitted and one is refused.
func wantFree(t *testing.T, s *slots, c *client.Client, call func() (bool, error)) {
	t.Helper()
	if admitted, refused := burst(t, s, c, holdSlots+1, call); admitted != holdSlots || refused != 1 {
		t.Fatalf("%d calls at once: %d admitted, %d refused; want %d and 1: the slots are not free",
			holdSlots+1, admitted, refused, holdSlots)
	}
}

// holdApp is an application behind client.Middleware whose handlers block
// (/api/block?status=N, answering N once the gate opens), panic
// (/api/panic) or hijack the connection and block (/api/hijack).
type holdApp struct {
	*httptest.Server
	slots *slots
	http  *http.Client
}

func newHoldApp(t *testing.T, c *client.Client, cfg client.MiddlewareConfig) *holdApp {
	t.Helper()
	a := &holdApp{slots: newSlots(), http: &http.Client{Transport: &http.Transport{}}}
	cfg.TrustedProxies = loopback
	mux := http.NewServeMux()
	mux.HandleFunc("/api/block", func(w http.ResponseWriter, r *http.Request) {
		a.slots.enter()
		defer a.slots.leave()
		if !a.slots.block(r.Context().Done()) {
			return // the client went away
		}
		status, _ := strconv.Atoi(r.URL.Query().Get("status"))
		w.WriteHeader(max(status, http.StatusOK))
	})
	mux.HandleFunc("/api/panic", func(http.ResponseWriter, *http.Request) {
		a.slots.enter()
		defer a.slots.leave()
		panic("the handler fails")
	})
	mux.HandleFunc("/api/hijack", func(w http.ResponseWriter, _ *http.Request) {
		a.slots.enter()
		defer a.slots.leave()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			panic(err)
		}
		defer conn.Close()
		a.slots.block(nil)
	})
	a.Server = httptest.NewUnstartedServer(client.Middleware(c, cfg)(mux))
	a.Config.ErrorLog = log.New(io.Discard, "", 0) // the panics' stacks
	a.Start()
	t.Cleanup(func() { a.http.CloseIdleConnections(); a.Close() })
	return a
}

// get sends GET path as the client ip and returns its status.
func (a *holdApp) get(ctx context.Context, ip, path string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.URL+path, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("X-Forwarded-For", ip)
	resp, err := a.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// blocking is a call of a blocking handler as ip, answered want once
// admitted.
func (a *holdApp) blocking(ip string, want int) func() (bool, error) {
	return func() (bool, error) {
		status, err := a.get(context.Background(), ip, "/api/block?status="+strconv.Itoa(want))
		switch {
		case err != nil:
			return false, err
		case status == http.StatusTooManyRequests:
			return true, nil
		case status != want:
			return false, fmt.Errorf("status %d, want %d or 429", status, want)
		}
		return false, nil
	}
}

// awaitEntered waits until n handlers have entered in all.
func (a *holdApp) awaitEntered(t *testing.T, n int64) {
	t.Helper()
	testkit.WaitFor(t, 30*time.Second, fmt.Sprintf("%d handlers entered", n), func() bool { return a.slots.entered.Load() >= n })
}

// Through client.Middleware, against a limiter, under a rule of 2 requests
// in flight per address: of 20 requests at once whose handler blocks,
// exactly 2 are in the handler and the 18 others are refused 429; once the
// handlers return, both slots are free again. They are freed whatever the
// handler did: panicked, served a client that half-closed its connection
// or cancelled its request, hijacked the connection. With NeverReport the
// releases are still sent, and spend nothing: the 403s it answers never
// debit the rule spent by reports of 403s.
func TestClientMiddlewareReleasesHolds(t *testing.T) {
	t.Parallel() // mostly waits on the limiter's start
	e := newEnvWith(t, holdRulesYAML)
	lim := e.start("limiter")
	for _, tc := range []struct {
		name string
		cfg  client.MiddlewareConfig
		// status is what the blocking handler answers: with reports off, a
		// 403, which a report would debit.
		status int
		ip     byte // the addresses 198.51.100.ip+0...
	}{
		{"reports", client.MiddlewareConfig{}, http.StatusOK, 80},
		{"NeverReport", client.MiddlewareConfig{ReportIf: client.NeverReport}, http.StatusForbidden, 90},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newClient(t, client.Config{URL: "http://" + lim.addr, OnFailure: client.FailClosed})
			app := newHoldApp(t, c, tc.cfg)
			ip := func(i byte) string { return fmt.Sprintf("198.51.100.%d", tc.ip+i) }

			t.Run("20 at once", func(t *testing.T) {
				if admitted, refused := burst(t, app.slots, c, 20, app.blocking(ip(0), tc.status)); admitted != holdSlots || refused != 20-holdSlots {
					t.Fatalf("20 requests at once: %d admitted, %d refused; want %d and %d", admitted, refused, holdSlots, 20-holdSlots)
				}
				wantFree(t, app.slots, c, app.blocking(ip(0), tc.status))
			})
			t.Run("panic", func(t *testing.T) {
				sent := c.Stats().HoldsSent
				for range holdSlots {
					// On a connection of its own: net/http sends a GET again,
					// on another kept-alive connection, when the one it was
					// sent on closes without an answer.
					conn, err := net.Dial("tcp", app.Listener.Addr().String())
					if err != nil {
						t.Fatal(err)
					}
					defer conn.Close()
					_, _ = fmt.Fprintf(conn, "GET /api/panic HTTP/1.1\r\nHost: app\r\nX-Forwarded-For: %s\r\n\r\n", ip(1))
					if answer, err := io.ReadAll(conn); len(answer) > 0 || err != nil {
						t.Fatalf("a panicking handler answered %q, %v; want the connection closed", answer, err)
					}
				}
				awaitReleases(t, c, sent+holdSlots)
				wantFree(t, app.slots, c, app.blocking(ip(1), tc.status))
			})
			t.Run("half-closed", func(t *testing.T) {
				app.slots.shut() // the handlers return only when their client goes
				sent, entered := c.Stats().HoldsSent, app.slots.entered.Load()
				for i := range int64(holdSlots) {
					conn, err := net.Dial("tcp", app.Listener.Addr().String())
					if err != nil {
						t.Fatal(err)
					}
					defer conn.Close()
					if _, err := fmt.Fprintf(conn, "GET /api/block HTTP/1.1\r\nHost: app\r\nX-Forwarded-For: %s\r\n\r\n", ip(2)); err != nil {
						t.Fatal(err)
					}
					app.awaitEntered(t, entered+i+1)
					if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
						t.Fatal(err)
					}
				}
				awaitReleases(t, c, sent+holdSlots)
				wantFree(t, app.slots, c, app.blocking(ip(2), tc.status))
			})
			t.Run("cancelled", func(t *testing.T) {
				app.slots.shut()
				sent, entered := c.Stats().HoldsSent, app.slots.entered.Load()
				for i := range int64(holdSlots) {
					ctx, cancel := context.WithCancel(context.Background())
					done := make(chan error, 1)
					go func() { _, err := app.get(ctx, ip(3), "/api/block"); done <- err }()
					app.awaitEntered(t, entered+i+1)
					cancel()
					if err := <-done; !errors.Is(err, context.Canceled) {
						t.Fatalf("a cancelled request: %v", err)
					}
				}
				awaitReleases(t, c, sent+holdSlots)
				wantFree(t, app.slots, c, app.blocking(ip(3), tc.status))
			})
			t.Run("hijacked", func(t *testing.T) {
				app.slots.shut()
				sent, entered := c.Stats().HoldsSent, app.slots.entered.Load()
				var wg sync.WaitGroup
				for range holdSlots {
					wg.Go(func() {
						conn, err := net.Dial("tcp", app.Listener.Addr().String())
						if err != nil {
							t.Error(err)
							return
						}
						defer conn.Close()
						_, _ = fmt.Fprintf(conn, "GET /api/hijack HTTP/1.1\r\nHost: app\r\nX-Forwarded-For: %s\r\n\r\n", ip(4))
						_, _ = bufio.NewReader(conn).ReadString('\n') // until the handler closes it
					})
				}
				app.awaitEntered(t, entered+holdSlots)
				app.slots.open()
				wg.Wait()
				awaitReleases(t, c, sent+holdSlots)
				wantFree(t, app.slots, c, app.blocking(ip(4), tc.status))
			})
		})
	}
}

// holdService is grpc's health service behind the rlgrpc interceptors,
// with interceptors in place of its handlers: a call blocks in its
// "handler" until the gate opens (then Check answers OK, Watch ends with
// the code its x-code metadata names, OK by default), unless its caller
// goes first; with x-panic metadata it panics, and a recovery interceptor
// in front answers Internal.
func holdService(t *testing.T, c *client.Client, unary, stream rlgrpc.Config) (*slots, healthpb.HealthClient) {
	t.Helper()
	s := newSlots()
	unary.TrustedProxies, stream.TrustedProxies = loopback, loopback
	recoverUnary := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if p := recover(); p != nil {
				err = status.Errorf(codes.Internal, "panic: %v", p)
			}
		}()
		return handler(ctx, req)
	}
	recoverStream := func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = status.Errorf(codes.Internal, "panic: %v", p)
			}
		}()
		return handler(srv, ss)
	}
	serve := func(ctx context.Context) error {
		s.enter()
		defer s.leave()
		if len(metadata.ValueFromIncomingContext(ctx, "x-panic")) > 0 {
			panic("the handler fails")
		}
		if !s.block(ctx.Done()) {
			return ctx.Err()
		}
		if v := metadata.ValueFromIncomingContext(ctx, "x-code"); len(v) > 0 {
			code, _ := strconv.Atoi(v[0])
			return status.Error(codes.Code(code), "the handler's error")
		}
		return nil
	}
	unaryHandler := func(ctx context.Context, _ any, _ *grpc.UnaryServerInfo, _ grpc.UnaryHandler) (any, error) {
		if err := serve(ctx); err != nil {
			return nil, err
		}
		return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
	}
	streamHandler := func(_ any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, _ grpc.StreamHandler) error {
		return serve(ss.Context())
	}
	conn := serveGRPCHealth(t,
		grpc.ChainUnaryInterceptor(recoverUnary, rlgrpc.UnaryServerInterceptor(c, unary), unaryHandler),
		grpc.ChainStreamInterceptor(recoverStream, rlgrpc.StreamServerInterceptor(c, stream), streamHandler))
	return s, healthpb.NewHealthClient(conn)
}

// grpcCall makes a call (Check, or a Watch it reads to its end) as ip with
// metadata md, and reports whether it was refused (ResourceExhausted); a
// call admitted must end with want.
func grpcCall(ctx context.Context, hc healthpb.HealthClient, watch bool, ip string, want codes.Code, md ...string) (bool, error) {
	ctx = metadata.AppendToOutgoingContext(ctx, append([]string{"x-forwarded-for", ip}, md...)...)
	var err error
	if watch {
		var st grpc.ServerStreamingClient[healthpb.HealthCheckResponse]
		if st, err = hc.Watch(ctx, &healthpb.HealthCheckRequest{}); err == nil {
			for err == nil {
				_, err = st.Recv()
			}
			if errors.Is(err, io.EOF) {
				err = nil
			}
		}
	} else {
		_, err = hc.Check(ctx, &healthpb.HealthCheckRequest{})
	}
	switch code := status.Code(err); code {
	case codes.ResourceExhausted:
		return true, nil
	case want:
		return false, nil
	default:
		return false, fmt.Errorf("code %v (%v), want %v or ResourceExhausted", code, err, want)
	}
}

// Through the rlgrpc interceptors, as through the middleware: of 20 calls
// at once, exactly 2 are in the handler and the others are refused; the
// slots are free once the handlers return, whatever they did: returned,
// returned an error (a stream), panicked, or served a caller that
// cancelled. The stream interceptor reports nothing (ReportIf false) and
// still releases.
func TestClientGRPCReleasesHolds(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, holdRulesYAML)
	lim := e.start("limiter")
	c := newClient(t, client.Config{URL: "http://" + lim.addr, OnFailure: client.FailClosed})
	never := func(context.Context, string, codes.Code) bool { return false }
	s, hc := holdService(t, c, rlgrpc.Config{}, rlgrpc.Config{ReportIf: never})
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		watch bool
		ip    string
	}{
		{"unary", false, "198.51.100.100"},
		{"stream", true, "198.51.100.110"},
	} {
		ip := func(i byte) string {
			a := netip.MustParseAddr(tc.ip).As4()
			a[3] += i
			return netip.AddrFrom4(a).String()
		}
		call := func(ip string, want codes.Code, md ...string) func() (bool, error) {
			return func() (bool, error) { return grpcCall(ctx, hc, tc.watch, ip, want, md...) }
		}
		t.Run(tc.name+"/20 at once", func(t *testing.T) {
			if admitted, refused := burst(t, s, c, 20, call(ip(0), codes.OK)); admitted != holdSlots || refused != 20-holdSlots {
				t.Fatalf("20 calls at once: %d admitted, %d refused; want %d and %d", admitted, refused, holdSlots, 20-holdSlots)
			}
			wantFree(t, s, c, call(ip(0), codes.OK))
		})
		t.Run(tc.name+"/error", func(t *testing.T) {
			aborted := strconv.Itoa(int(codes.Aborted))
			if admitted, refused := burst(t, s, c, 20, call(ip(1), codes.Aborted, "x-code", aborted)); admitted != holdSlots || refused != 20-holdSlots {
				t.Fatalf("20 calls at once: %d admitted, %d refused; want %d and %d", admitted, refused, holdSlots, 20-holdSlots)
			}
			wantFree(t, s, c, call(ip(1), codes.Aborted, "x-code", aborted))
		})
		t.Run(tc.name+"/panic", func(t *testing.T) {
			sent := c.Stats().HoldsSent
			for range holdSlots {
				if refused, err := grpcCall(ctx, hc, tc.watch, ip(2), codes.Internal, "x-panic", "1"); refused || err != nil {
					t.Fatalf("a panicking handler: refused %v, %v", refused, err)
				}
			}
			awaitReleases(t, c, sent+holdSlots)
			wantFree(t, s, c, call(ip(2), codes.OK))
		})
		t.Run(tc.name+"/cancelled", func(t *testing.T) {
			s.shut() // the handlers return only when their caller goes
			sent, entered := c.Stats().HoldsSent, s.entered.Load()
			for i := range int64(holdSlots) {
				ctx, cancel := context.WithCancel(ctx)
				done := make(chan error, 1)
				go func() { _, err := grpcCall(ctx, hc, tc.watch, ip(3), codes.Canceled); done <- err }()
				testkit.WaitFor(t, 30*time.Second, "the call in its handler", func() bool { return s.entered.Load() >= entered+i+1 })
				cancel()
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			}
			awaitReleases(t, c, sent+holdSlots)
			wantFree(t, s, c, call(ip(3), codes.OK))
		})
	}
}
