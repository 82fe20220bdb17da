package rlgrpc

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/ratewarden/ratewarden/client"
)

// answering is a limiter that gives every call the same answer.
func answering(t *testing.T, code int, body string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func newClient(t *testing.T, cfg client.Config) *client.Client {
	t.Helper()
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// A gRPC call whose deadline has passed when the limiter fails ends with
// its own context's error, and its handler never runs.
func TestInterceptorCallerGone(t *testing.T) {
	f := answering(t, 503, `{"error":"down"}`)
	c := newClient(t, client.Config{URL: f.URL}) // FailOpen
	intercept := UnaryServerInterceptor(c, Config{})
	info := &grpc.UnaryServerInfo{FullMethod: "/pkg.S/M"}
	var handled atomic.Int64
	handler := func(context.Context, any) (any, error) { handled.Add(1); return "ok", nil }
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(203, 0, 113, 7), Port: 5}})
	expired, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Millisecond))
	defer cancel()
	if _, err := intercept(expired, nil, info, handler); status.Code(err) != codes.DeadlineExceeded || handled.Load() != 0 {
		t.Fatalf("deadline passed: %v, handled %d times", err, handled.Load())
	}
	if _, err := intercept(ctx, nil, info, handler); err != nil || handled.Load() != 1 {
		t.Fatalf("caller there: %v, handled %d times, want FailOpen's", err, handled.Load())
	}
}

// A call the limiter refuses as invalid is refused InvalidArgument,
// whatever the failure policy, and never served.
func TestRefusedAsInvalid(t *testing.T) {
	f := answering(t, 400, `{"error":"attributes: at most 32 entries"}`)
	c := newClient(t, client.Config{URL: f.URL}) // FailOpen
	var served atomic.Int64
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(203, 0, 113, 7), Port: 5}})
	_, err := UnaryServerInterceptor(c, Config{})(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/pkg.S/M"},
		func(context.Context, any) (any, error) { served.Add(1); return nil, nil })
	if status.Code(err) != codes.InvalidArgument || served.Load() != 0 {
		t.Fatalf("interceptor: %v, served %d times", err, served.Load())
	}
	if s := c.Stats(); s.Invalid != 1 || s.Fallbacks != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// The limiter's 503 for a check that a rule whose on_redis_failure is deny
// could not decide (Redis down), as it writes it.
const undecidableAnswer = `{"error":"rule login-deny cannot be decided: redis unavailable and its failure policy is deny","rule_id":"login-deny","on_redis_failure":"deny"}` + "\n"

// The interceptor answers such a call Unavailable, as the limiter's own
// rate limit API answers Envoy for a deny rule it cannot decide, with the
// retry delay, and never runs the handler.
func TestInterceptorUndecidable(t *testing.T) {
	f := answering(t, 503, undecidableAnswer)
	c, err := client.New(client.Config{URL: f.URL, BreakerFailures: 1, BreakerOpen: time.Hour}) // FailOpen
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	conn := serveHealth(t, c, Config{})
	for range 3 {
		md, err := checkCall(t, conn, "")
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("call: %v, want Unavailable", err)
		}
		var retry *errdetails.RetryInfo
		for _, d := range status.Convert(err).Details() {
			if r, ok := d.(*errdetails.RetryInfo); ok {
				retry = r
			}
		}
		if retry == nil || retry.GetRetryDelay().AsDuration() != time.Second {
			t.Fatalf("call: %v, want a RetryInfo of 1s", err)
		}
		wantMetadata(t, md, map[string]string{"retry-after": "1"})
	}
	if s := c.Stats(); s.Undecidable != 3 || s.Fallbacks != 0 || s.BreakerOpen != 0 {
		t.Fatalf("stats %+v", s)
	}
}
