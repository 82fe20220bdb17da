package rlgrpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/client"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// fakeLimiter answers /v1/check with one decision, as the limiter's
// httpapi writes it, and records the checks and reports it gets.
type fakeLimiter struct {
	srv      *httptest.Server
	decision string            // the JSON answer of a check
	headers  map[string]string // its rate-limit headers
	mu       sync.Mutex
	checks   []map[string]any
	reports  chan map[string]any
}

func newFakeLimiter(t *testing.T, decision string, headers map[string]string) *fakeLimiter {
	t.Helper()
	f := &fakeLimiter{decision: decision, headers: headers, reports: make(chan map[string]any, 100)}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/check", func(w http.ResponseWriter, r *http.Request) {
		var check map[string]any
		if err := json.NewDecoder(r.Body).Decode(&check); err != nil {
			http.Error(w, `{"error":"bad json"}`, http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		f.checks = append(f.checks, check)
		f.mu.Unlock()
		for k, v := range f.headers {
			w.Header().Set(k, v)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, f.decision+"\n")
	})
	mux.HandleFunc("POST /v1/report/batch", func(w http.ResponseWriter, r *http.Request) {
		var batch struct{ Reports []map[string]any }
		if err := json.NewDecoder(r.Body).Decode(&batch); err != nil {
			http.Error(w, `{"error":"bad json"}`, http.StatusBadRequest)
			return
		}
		answers := make([]string, len(batch.Reports))
		for i, rep := range batch.Reports {
			select {
			case f.reports <- rep:
			default: // a test that makes many calls reads none
			}
			answers[i] = `{"event_id":"e","mode":"redis","rules":[]}`
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"reports":[`+strings.Join(answers, ",")+"]}\n")
	})
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

// lastCheck returns the last check the limiter got.
func (f *fakeLimiter) lastCheck(t *testing.T) map[string]any {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.checks) == 0 {
		t.Fatal("the limiter got no check")
	}
	return f.checks[len(f.checks)-1]
}

// nextReport waits for the next outcome reported.
func (f *fakeLimiter) nextReport(t *testing.T) map[string]any {
	t.Helper()
	select {
	case r := <-f.reports:
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("no report within 5s")
		return nil
	}
}

// noReport fails if an outcome is reported within a little while.
func (f *fakeLimiter) noReport(t *testing.T) {
	t.Helper()
	select {
	case r := <-f.reports:
		t.Fatalf("reported %v, want no report", r)
	case <-time.After(50 * time.Millisecond):
	}
}

const (
	allowedJSON = `{"allowed":true,"reason":"ok","rule_id":"per-ip","algorithm":"fixed_window","limit":10,` +
		`"remaining":9,"reset_after_ms":41250,"retry_after_ms":0,"mode":"redis","shadow":false,"event_id":"e1"}`
	limitedJSON = `{"allowed":false,"reason":"rate_limited","rule_id":"per-ip","algorithm":"fixed_window","limit":10,` +
		`"remaining":0,"reset_after_ms":1500,"retry_after_ms":1500,"mode":"redis","shadow":false,"event_id":"e2"}`
	bannedJSON = `{"allowed":false,"reason":"banned","rule_id":"","algorithm":"","limit":0,` +
		`"remaining":0,"reset_after_ms":0,"retry_after_ms":3600000,"mode":"redis","shadow":false,"event_id":"e3"}`
)

var (
	allowedHeaders = map[string]string{
		"RateLimit-Policy": `"per-ip/1m";q=10;w=60`, "RateLimit": `"per-ip/1m";r=9;t=42`,
		"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "9", "X-RateLimit-Reset": "42",
	}
	limitedHeaders = map[string]string{
		"RateLimit-Policy": `"per-ip/1m";q=10;w=60`, "RateLimit": `"per-ip/1m";r=0;t=2`,
		"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "2", "Retry-After": "2",
	}
	bannedHeaders = map[string]string{"Retry-After": "3600"}
)

// serveHealth serves grpc's health service behind the interceptors of c
// and returns a connection to it.
func serveHealth(t *testing.T, c *client.Client, cfg Config) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(grpc.UnaryInterceptor(UnaryServerInterceptor(c, cfg)),
		grpc.StreamInterceptor(StreamServerInterceptor(c, cfg)))
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(s, hs)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func newTestClient(t *testing.T, url string, policy client.FailurePolicy) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{URL: url, OnFailure: policy, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	return c
}

// checkCall makes a unary health check and returns its header metadata.
func checkCall(t *testing.T, conn *grpc.ClientConn, service string, md ...string) (metadata.MD, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, md...)
	var header metadata.MD
	_, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service}, grpc.Header(&header))
	return header, err
}

// wantMetadata fails unless md has want's values (and no other rate-limit
// key when exact).
func wantMetadata(t *testing.T, md metadata.MD, want map[string]string) {
	t.Helper()
	for _, k := range limitMetadataKeys {
		got := md.Get(k)
		w, ok := want[k]
		switch {
		case ok && (len(got) != 1 || got[0] != w):
			t.Errorf("metadata %s = %q, want %q", k, got, w)
		case !ok && len(got) > 0:
			t.Errorf("metadata %s = %q, want none", k, got)
		}
	}
}

// lower returns the headers under their metadata keys.
func lower(h map[string]string) map[string]string {
	m := make(map[string]string, len(h))
	for k, v := range h {
		m[strings.ToLower(k)] = v
	}
	return m
}

func TestUnaryInterceptorDecisions(t *testing.T) {
	tests := []struct {
		name        string
		decision    string
		headers     map[string]string
		wantCode    codes.Code
		wantMessage string
		wantRetry   time.Duration // the RetryInfo detail
	}{
		{"allowed passes with the rate-limit metadata", allowedJSON, allowedHeaders, codes.OK, "", 0},
		{"rate limited", limitedJSON, limitedHeaders, codes.ResourceExhausted, "too many requests; retry after 2s", 1500 * time.Millisecond},
		{"banned", bannedJSON, bannedHeaders, codes.PermissionDenied, "forbidden; retry after 3600s", time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeLimiter(t, tt.decision, tt.headers)
			conn := serveHealth(t, newTestClient(t, f.srv.URL, client.FailOpen), Config{})
			md, err := checkCall(t, conn, "")
			st := status.Convert(err)
			if st.Code() != tt.wantCode || (err != nil && st.Message() != tt.wantMessage) {
				t.Fatalf("call: %v, want %v %q", err, tt.wantCode, tt.wantMessage)
			}
			wantMetadata(t, md, lower(tt.headers))
			check := f.lastCheck(t)
			if check["endpoint"] != "/grpc.health.v1.Health/Check" || check["method"] != "POST" || check["ip"] != "127.0.0.1" {
				t.Errorf("check = %v, want the full method, POST and 127.0.0.1", check)
			}
			if tt.wantCode != codes.OK {
				var retry time.Duration
				for _, d := range st.Details() {
					if ri, ok := d.(*errdetails.RetryInfo); ok {
						retry = ri.GetRetryDelay().AsDuration()
					}
				}
				if retry != tt.wantRetry {
					t.Errorf("RetryInfo delay = %v, want %v", retry, tt.wantRetry)
				}
				f.noReport(t) // a refused call is the limiter's own decision: nothing to report
				return
			}
			r := f.nextReport(t)
			if r["status"] != 200.0 || r["endpoint"] != "/grpc.health.v1.Health/Check" || r["ip"] != "127.0.0.1" {
				t.Errorf("report = %v, want status 200 of the call", r)
			}
		})
	}
}

func TestUnaryInterceptorLimiterDown(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close() // its address now refuses connections
	tests := []struct {
		name     string
		policy   client.FailurePolicy
		wantCode codes.Code
	}{
		{"fail open lets the call through", client.FailOpen, codes.OK},
		{"fail closed refuses it as rate limited", client.FailClosed, codes.ResourceExhausted},
		{"a fallback's refusal carries its retry-after", client.Fallback(func(context.Context, *client.Request) client.Decision {
			return client.Decision{RetryAfter: 2500 * time.Millisecond}
		}), codes.ResourceExhausted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newTestClient(t, dead.URL, tt.policy)
			conn := serveHealth(t, c, Config{})
			md, err := checkCall(t, conn, "")
			if status.Code(err) != tt.wantCode {
				t.Fatalf("call: %v, want %v", err, tt.wantCode)
			}
			if got := c.Stats().Fallbacks; got != 1 {
				t.Errorf("fallbacks = %d, want 1", got)
			}
			want := map[string]string{}
			switch {
			case strings.HasPrefix(tt.name, "a fallback"):
				want["retry-after"] = "3"
			case tt.wantCode != codes.OK: // FailClosed: retry after a second
				want["retry-after"] = "1"
			}
			wantMetadata(t, md, want)
		})
	}
}

func TestUnaryInterceptorReportsMappedStatus(t *testing.T) {
	f := newFakeLimiter(t, allowedJSON, allowedHeaders)
	cfg := Config{
		User:       func(context.Context, string) string { return "alice" },
		ReportCost: func(_ context.Context, _ string, code codes.Code) int64 { return int64(code) + 100 },
	}
	conn := serveHealth(t, newTestClient(t, f.srv.URL, client.FailOpen), cfg)
	// The health service answers NotFound for a service it does not know.
	if _, err := checkCall(t, conn, "unknown"); status.Code(err) != codes.NotFound {
		t.Fatalf("call: %v, want NotFound", err)
	}
	r := f.nextReport(t)
	if r["status"] != 404.0 || r["user_id"] != "alice" || r["method"] != "POST" || r["cost"] != float64(100+codes.NotFound) {
		t.Errorf("report = %v, want status 404, alice, POST and cost %d", r, 100+codes.NotFound)
	}

	never := serveHealth(t, newTestClient(t, f.srv.URL, client.FailOpen), Config{
		ReportIf: func(context.Context, string, codes.Code) bool { return false },
	})
	if _, err := checkCall(t, never, ""); err != nil {
		t.Fatal(err)
	}
	f.noReport(t)
}

func TestInterceptorTrustedProxies(t *testing.T) {
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	other := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	tests := []struct {
		name    string
		trusted []netip.Prefix
		md      []string
		want    string
	}{
		{"trusted peer: x-forwarded-for names the client", loopback,
			[]string{"x-forwarded-for", "6.6.6.6, 198.51.100.4"}, "198.51.100.4"},
		{"trusted peer: x-real-ip without x-forwarded-for", loopback,
			[]string{"x-real-ip", "198.51.100.5"}, "198.51.100.5"},
		{"untrusted peer: metadata ignored", other,
			[]string{"x-forwarded-for", "198.51.100.4", "x-real-ip", "198.51.100.5"}, "127.0.0.1"},
		{"no trusted proxies: metadata ignored", nil,
			[]string{"x-forwarded-for", "198.51.100.4"}, "127.0.0.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeLimiter(t, allowedJSON, nil)
			conn := serveHealth(t, newTestClient(t, f.srv.URL, client.FailOpen), Config{TrustedProxies: tt.trusted})
			if _, err := checkCall(t, conn, "", tt.md...); err != nil {
				t.Fatal(err)
			}
			if got := f.lastCheck(t)["ip"]; got != tt.want {
				t.Errorf("check ip = %v, want %s", got, tt.want)
			}
			if got := f.nextReport(t)["ip"]; got != tt.want {
				t.Errorf("report ip = %v, want %s", got, tt.want)
			}
		})
	}
}

func TestStreamInterceptor(t *testing.T) {
	tests := []struct {
		name     string
		decision string
		headers  map[string]string
		wantCode codes.Code
	}{
		{"allowed", allowedJSON, allowedHeaders, codes.OK},
		{"rate limited", limitedJSON, limitedHeaders, codes.ResourceExhausted},
		{"banned", bannedJSON, bannedHeaders, codes.PermissionDenied},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeLimiter(t, tt.decision, tt.headers)
			conn := serveHealth(t, newTestClient(t, f.srv.URL, client.FailOpen), Config{})
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			watch, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{})
			if err != nil {
				t.Fatal(err)
			}
			_, err = watch.Recv()
			if status.Code(err) != tt.wantCode {
				t.Fatalf("recv: %v, want %v", err, tt.wantCode)
			}
			md, err := watch.Header()
			if err != nil {
				t.Fatal(err)
			}
			wantMetadata(t, md, lower(tt.headers))
			if check := f.lastCheck(t); check["endpoint"] != "/grpc.health.v1.Health/Watch" {
				t.Errorf("check = %v, want the Watch endpoint", check)
			}
			if tt.wantCode != codes.OK {
				f.noReport(t)
				return
			}
			cancel() // the stream ends: its handler returns Canceled
			if r := f.nextReport(t); r["status"] != 499.0 || r["endpoint"] != "/grpc.health.v1.Health/Watch" {
				t.Errorf("report = %v, want status 499 of Watch", r)
			}
		})
	}
}

func TestInterceptorDenied(t *testing.T) {
	f := newFakeLimiter(t, limitedJSON, limitedHeaders)
	cfg := Config{
		Endpoint: func(_ context.Context, m string) string { return "/grpc" + m },
		Denied: func(_ context.Context, m string, d client.Decision) error {
			return status.Errorf(codes.Unavailable, "%s: %s", m, d.Reason)
		},
	}
	conn := serveHealth(t, newTestClient(t, f.srv.URL, client.FailOpen), cfg)
	md, err := checkCall(t, conn, "")
	if st := status.Convert(err); st.Code() != codes.Unavailable || st.Message() != "/grpc.health.v1.Health/Check: rate_limited" {
		t.Fatalf("call: %v, want Denied's error", err)
	}
	wantMetadata(t, md, lower(limitedHeaders))
	if got := f.lastCheck(t)["endpoint"]; got != "/grpc/grpc.health.v1.Health/Check" {
		t.Errorf("endpoint = %v, want Endpoint's", got)
	}
}

func TestHTTPStatusOf(t *testing.T) {
	want := map[codes.Code]int{
		codes.OK: 200, codes.Canceled: 499, codes.Unknown: 500, codes.InvalidArgument: 400,
		codes.DeadlineExceeded: 504, codes.NotFound: 404, codes.AlreadyExists: 409, codes.PermissionDenied: 403,
		codes.ResourceExhausted: 429, codes.FailedPrecondition: 400, codes.Aborted: 409, codes.OutOfRange: 400,
		codes.Unimplemented: 501, codes.Internal: 500, codes.Unavailable: 503, codes.DataLoss: 500,
		codes.Unauthenticated: 401, codes.Code(99): 500,
	}
	for code, status := range want {
		if got := httpStatusOf(code); got != status {
			t.Errorf("httpStatusOf(%v) = %d, want %d", code, got, status)
		}
	}
}

func TestCodeOf(t *testing.T) {
	tests := []struct {
		err  error
		want codes.Code
	}{
		{nil, codes.OK},
		{status.Error(codes.NotFound, "x"), codes.NotFound},
		{fmt.Errorf("query: %w", context.Canceled), codes.Canceled},
		{context.DeadlineExceeded, codes.DeadlineExceeded},
		{errors.New("plain"), codes.Unknown},
	}
	for _, tt := range tests {
		if got := codeOf(tt.err); got != tt.want {
			t.Errorf("codeOf(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}
