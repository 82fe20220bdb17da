package rlsapi_test

import (
	"context"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ratewarden/ratewarden/internal/rlsapi"
	"github.com/ratewarden/ratewarden/internal/rules"
)

// openCall opens a ShouldRateLimit call on conn with the given
// authorization metadata (none when empty) and sends no request message.
func openCall(t *testing.T, ctx context.Context, conn *grpc.ClientConn, auth string) grpc.ClientStream {
	t.Helper()
	if auth != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", auth)
	}
	s, err := conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, rlsv3.RateLimitService_ShouldRateLimit_FullMethodName)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A call without a token that never sends its request message ends
// DeadlineExceeded after about a second, without reaching the service; one
// that sends it is refused Unauthenticated.
func TestUnauthenticatedCallWithoutMessageEnds(t *testing.T) {
	e := newEnv(t, []rules.Rule{rule("t", "auth", 100, time.Hour, "k", "")}, options{tokens: []string{tokenOld}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // generous: it ends after 1 s
	defer cancel()
	s := openCall(t, ctx, e.conn, "Bearer wrong-"+tokenOld)
	var resp rlsv3.RateLimitResponse
	if err := s.RecvMsg(&resp); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a call without a token or a message: %v, want DeadlineExceeded", err)
	}
	if err := e.callWith(request("auth", desc("k", "a"))); status.Code(err) != codes.Unauthenticated {
		t.Errorf("a call without a token, with its message: %v, want Unauthenticated", err)
	}
	e.wantMetric("rate_limit_rls_requests_total", map[string]string{"domain": "_unknown", "code": "unauthenticated"}, 2)
	if n := e.events.len(); n != 0 {
		t.Errorf("%d events: a refused call reached the service", n)
	}
	if err := e.callWith(request("auth", desc("k", "a")), "Bearer "+tokenOld); err != nil {
		t.Errorf("a call with the token on the same connection: %v", err)
	}
}

// Headers over MaxHeaderListSize (16 KiB) are refused, with a token or
// not, and the call never reaches the service; the server advertises the
// bound, so grpc-go refuses to send them.
func TestOversizedMetadataRefused(t *testing.T) {
	e := newEnv(t, []rules.Rule{rule("t", "auth", 100, time.Hour, "k", "")}, options{tokens: []string{tokenOld}})
	req := request("auth", desc("k", "a"))
	if err := e.callWith(req, "Bearer "+tokenOld); err != nil { // the connection has the server's settings
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tokenOld, "x-pad", strings.Repeat("p", 20<<10))
	if _, err := e.client.ShouldRateLimit(ctx, req); status.Code(err) == codes.OK {
		t.Fatal("a call with 20 KiB of metadata answered")
	} else {
		t.Logf("20 KiB of metadata: %v", err)
	}
	if n := e.events.len(); n != 1 {
		t.Errorf("%d events, want 1: the oversized call was decided", n)
	}
	if err := e.callWith(req, "Bearer "+tokenOld); err != nil {
		t.Errorf("a call after: %v", err)
	}
}

// Health calls need no token; a connection with more than 4 of them in
// flight is closed, and another connection is served.
func TestHealthCallsPerConnectionBounded(t *testing.T) {
	e := newEnv(t, nil, options{tokens: []string{tokenOld}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn := e.dial(nil)
	health := healthpb.NewHealthClient(conn)
	var watches []healthpb.Health_WatchClient
	for i := range 5 {
		w, err := health.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		m, err := w.Recv()
		if i < 4 && (err != nil || m.Status != healthpb.HealthCheckResponse_SERVING) {
			t.Fatalf("watch %d without a token: %v %v, want SERVING", i, m, err)
		}
		if i == 4 && status.Code(err) != codes.Unavailable {
			t.Fatalf("watch 5 on one connection: %v %v, want the connection closed (Unavailable)", m, err)
		}
		watches = append(watches, w)
	}
	if _, err := watches[0].Recv(); status.Code(err) != codes.Unavailable {
		t.Errorf("watch 1 after the connection was closed: %v, want Unavailable", err)
	}
	e.wantMetric("rate_limit_rls_connections_closed_total", map[string]string{"reason": "health_calls"}, 1)
	if st, err := e.healthCheck(""); err != nil || st != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health on another connection: %v %v", st, err)
	}
}

// A connection with more than 4 calls without a token in flight is
// closed; a gateway's connection with a token is not affected.
func TestUnauthenticatedCallsPerConnectionBounded(t *testing.T) {
	e := newEnv(t, []rules.Rule{rule("t", "auth", 100, time.Hour, "k", "")}, options{tokens: []string{tokenOld}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn := e.dial(nil)
	var calls []grpc.ClientStream
	for range 5 {
		calls = append(calls, openCall(t, ctx, conn, ""))
	}
	var resp rlsv3.RateLimitResponse
	for i, s := range calls {
		// The fifth closes the connection at once; without it each would
		// end after a second, DeadlineExceeded.
		if err := s.RecvMsg(&resp); status.Code(err) != codes.Unavailable {
			t.Errorf("call %d: %v, want Unavailable: the connection closed", i, err)
		}
	}
	e.wantMetric("rate_limit_rls_connections_closed_total", map[string]string{"reason": "unauthenticated_calls"}, 1)
	if err := e.callWith(request("auth", desc("k", "a")), "Bearer "+tokenOld); err != nil {
		t.Errorf("a call with the token on another connection: %v", err)
	}
}

// A connection past Listener's bound is closed as soon as it is accepted;
// once one closes, a new one is served.
func TestMaxConnections(t *testing.T) {
	e := newEnv(t, nil, options{maxConns: 2})
	call := func(conn *grpc.ClientConn) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, request("any", desc("k", "v")))
		return err
	}
	first, second := e.dial(nil), e.dial(nil)
	for i, c := range []*grpc.ClientConn{first, second} {
		if err := call(c); err != nil {
			t.Fatalf("connection %d: %v", i+1, err)
		}
	}
	if err := call(e.dial(nil)); status.Code(err) != codes.Unavailable {
		t.Fatalf("a third connection: %v, want Unavailable", err)
	}
	e.wantMetric("rate_limit_rls_connections_closed_total", map[string]string{"reason": "max_connections"}, 1)
	_ = first.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for { // the server sees the close when it reads the connection's end
		err := call(e.dial(nil))
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("a connection after one closed: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A connection without calls is sent GOAWAY after MaxConnectionIdle.
func TestIdleConnectionClosed(t *testing.T) {
	e := newEnv(t, nil, options{server: rlsapi.ServerOptions{MaxConnectionIdle: 100 * time.Millisecond}})
	e.mustCall(request("any", desc("k", "v")))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // generous: 100 ms, and 5 s at most to drain
	defer cancel()
	start := time.Now()
	for st := e.conn.GetState(); st == connectivity.Ready; st = e.conn.GetState() {
		if !e.conn.WaitForStateChange(ctx, st) {
			t.Fatalf("connection still %s after 30 s idle", st)
		}
	}
	t.Logf("%s after %v", e.conn.GetState(), time.Since(start).Round(time.Millisecond))
	e.mustCall(request("any", desc("k", "v"))) // the client reconnects
}
