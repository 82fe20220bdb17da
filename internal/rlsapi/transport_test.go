package rlsapi_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/limiter"
	"github.com/ratewarden/ratewarden/internal/rlsapi"
	"github.com/ratewarden/ratewarden/internal/rules"
	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/tlstest"
)

const (
	tokenOld = "0123456789abcdef0123456789abcdef"
	tokenNew = "fedcba9876543210fedcba9876543210"
)

// callWith sends a call with the given authorization metadata values.
func (e *env) callWith(req *rlsv3.RateLimitRequest, auth ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, a := range auth {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", a)
	}
	_, err := e.client.ShouldRateLimit(ctx, req)
	return err
}

func (e *env) healthCheck(service string) (healthpb.HealthCheckResponse_ServingStatus, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(e.conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	return resp.GetStatus(), err
}

func TestBearerTokens(t *testing.T) {
	rs := []rules.Rule{rule("t", "auth", 100, time.Hour, "k", "")}
	e := newEnv(t, rs, options{tokens: []string{tokenOld, tokenNew}})
	req := request("auth", desc("k", "a"))
	for _, tt := range []struct {
		name string
		auth []string
		want codes.Code
	}{
		{"no token", nil, codes.Unauthenticated},
		{"wrong token", []string{"Bearer " + tokenOld[:31] + "x"}, codes.Unauthenticated},
		{"no scheme", []string{tokenOld}, codes.Unauthenticated},
		{"two values", []string{"Bearer " + tokenOld, "Bearer " + tokenNew}, codes.Unauthenticated},
		{"first token", []string{"Bearer " + tokenOld}, codes.OK},
		{"second token", []string{"bearer " + tokenNew}, codes.OK},
	} {
		if err := e.callWith(req, tt.auth...); status.Code(err) != tt.want {
			t.Errorf("%s: %v, want %s", tt.name, err, tt.want)
		}
	}
	e.wantMetric("rate_limit_rls_requests_total", map[string]string{"domain": "_unknown", "code": "unauthenticated"}, 4)
	e.wantMetric("rate_limit_unauthenticated_requests_total", map[string]string{"api": "decisions"}, 4)
	if n := e.events.len(); n != 2 {
		t.Errorf("%d events, want 2: a refused call is not decided", n)
	}
	// Health checks need no token.
	if st, err := e.healthCheck(""); err != nil || st != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health without a token: %v %v, want SERVING", st, err)
	}
	body := `{"domain":"auth","descriptors":[{"entries":[{"key":"k","value":"a"}]}]}`
	// Rotated: the old token is no longer accepted.
	rotated := newEnv(t, rs, options{tokens: []string{tokenNew}})
	if err := rotated.callWith(req, "Bearer "+tokenOld); status.Code(err) != codes.Unauthenticated {
		t.Errorf("old token after rotation: %v, want Unauthenticated", err)
	}
	if err := rotated.callWith(req, "Bearer "+tokenNew); err != nil {
		t.Errorf("new token after rotation: %v", err)
	}
	// A caller that checks the tokens itself serves AnswerJSON, which does
	// not check them again.
	code, answer := rotated.srv.AnswerJSON(context.Background(), []byte(body))
	var resp rlsv3.RateLimitResponse
	if err := protojson.Unmarshal(answer, &resp); code != 200 || err != nil || resp.OverallCode != ok {
		t.Errorf("AnswerJSON without a token: %d %s", code, answer)
	}
}

func TestTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "rls")
	certFile, keyFile := ca.Server("127.0.0.1")
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, []rules.Rule{rule("t", "tls", 10, time.Hour, "k", "")}, options{
		server:    rlsapi.ServerOptions{TLS: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}},
		clientTLS: &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12},
	})
	checkResponse(t, "over TLS", e.mustCall(request("tls", desc("k", "a"))), ok, wantStatus{ok, limitOf("", 10, hour), 9, time.Hour})
	plain := rlsv3.NewRateLimitServiceClient(e.dial(nil))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := plain.ShouldRateLimit(ctx, request("tls", desc("k", "a"))); status.Code(err) != codes.Unavailable {
		t.Errorf("plaintext call to a TLS server: %v, want Unavailable", err)
	}
}

func TestHealthAndGracefulStop(t *testing.T) {
	e := newEnv(t, nil, options{})
	for _, svc := range []string{"", rlsapi.ServiceName} {
		if st, err := e.healthCheck(svc); err != nil || st != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health %q: %v %v, want SERVING", svc, st, err)
		}
	}
	if _, err := e.healthCheck("other"); status.Code(err) != codes.NotFound {
		t.Errorf("health of an unknown service: %v, want NotFound", err)
	}
	e.srv.SetServing(false)
	if st, _ := e.healthCheck(rlsapi.ServiceName); st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("after SetServing(false): %v", st)
	}
	e.srv.SetServing(true)

	// A watcher sees NOT_SERVING when the server stops; its stream holds
	// the server until the deadline, then it is cut off.
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	watch, err := healthpb.NewHealthClient(e.conn).Watch(wctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := watch.Recv(); err != nil || m.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("watch: %v %v", m, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := e.srv.GracefulStop(ctx, e.grpc); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("GracefulStop with a watch open: %v, want the deadline", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("GracefulStop took %s", took)
	}
	if m, err := watch.Recv(); err != nil || m.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("watch after stop: %v %v, want NOT_SERVING", m, err)
	}

	// Without streams it returns as soon as the calls in flight are done.
	e2 := newEnv(t, nil, options{})
	e2.mustCall(request("any", desc("k", "v")))
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	if err := e2.srv.GracefulStop(ctx2, e2.grpc); err != nil {
		t.Errorf("GracefulStop: %v", err)
	}
	if _, err := e2.call(request("any", desc("k", "v"))); status.Code(err) != codes.Unavailable {
		t.Errorf("a call after stop: %v, want Unavailable", err)
	}
}

func TestJSONEndpoint(t *testing.T) {
	e := newEnv(t, []rules.Rule{rule("j", "json", 1, time.Hour, "k", "")}, options{})
	body := `{"domain":"json","descriptors":[{"entries":[{"key":"k","value":"a"}]},{"entries":[{"key":"x","value":"y"}]}]}`
	decode := func(step, b string) *rlsv3.RateLimitResponse {
		t.Helper()
		var resp rlsv3.RateLimitResponse
		if err := protojson.Unmarshal([]byte(b), &resp); err != nil {
			t.Fatalf("%s: %q: %v", step, b, err)
		}
		return &resp
	}
	code, b := e.postJSON(body)
	if code != 200 {
		t.Fatalf("first: %d %s", code, b)
	}
	checkResponse(t, "first", decode("first", b), ok, wantStatus{ok, limitOf("", 1, hour), 0, time.Hour}, wantStatus{code: ok})
	code, b = e.postJSON(body)
	if code != 429 {
		t.Fatalf("second: %d %s", code, b)
	}
	checkResponse(t, "second", decode("second", b), overLimit, wantStatus{overLimit, limitOf("", 1, hour), 0, time.Hour}, wantStatus{code: ok})
	if !strings.Contains(b, `"overallCode"`) || !strings.Contains(b, `"requestsPerUnit"`) {
		t.Errorf("not proto3 JSON names: %s", b)
	}

	for _, tt := range []struct {
		name, method, body string
		code               int
		msg                string
	}{
		{"invalid", "", `{"domain":"json","descriptors":[]}`, 400, "descriptors: at least one required"},
		{"empty key", "", `{"domain":"json","descriptors":[{"entries":[{"value":"v"}]}]}`, 400, "descriptors[0].entries[0].key: empty"},
		{"unknown field", "", `{"domain":"json","bogus":1,"descriptors":[{"entries":[{"key":"k","value":"a"}]}]}`, 400, "not a RateLimitRequest"},
		{"wrong type", "", `{"domain":5}`, 400, "not a RateLimitRequest"},
		{"not JSON", "", `domain=json`, 400, "not a RateLimitRequest"},
	} {
		code, b := e.postJSON(tt.body)
		if code != tt.code || !strings.Contains(b, `"error":"`+tt.msg) {
			t.Errorf("%s: %d %s, want %d with %q", tt.name, code, b, tt.code, tt.msg)
		}
	}
	e.wantMetric("rate_limit_rls_invalid_requests_total", map[string]string{"field": "body"}, 3)
	e.wantMetric("rate_limit_rls_requests_total", map[string]string{"code": "invalid"}, 5)
}

func TestBannedAddressIsOverLimitEverywhere(t *testing.T) {
	e := newEnv(t, []rules.Rule{rule("r", "ban", 100, time.Hour, "k", "")}, options{
		bans: func(reg prometheus.Registerer) *limiter.BanSet {
			b := limiter.NewBanSet(reg)
			b.Apply(event.ActionBan, event.ScopeIP, "10.6.6.6", time.Now().Add(time.Hour))
			return b
		},
	})
	banned := wantStatus{overLimit, nil, 0, time.Hour}
	for _, addr := range []string{"10.6.6.6", "::ffff:10.6.6.6"} {
		resp := e.mustCall(request("ban", desc("k", "a"), desc("remote_address", addr), desc("none", "x")))
		checkResponse(t, addr, resp, overLimit, banned, banned, banned)
	}
	checkResponse(t, "another address", e.mustCall(request("ban", desc("k", "a"), desc("remote_address", "10.6.6.7"))), ok,
		wantStatus{ok, limitOf("", 100, hour), 99, time.Hour}, wantStatus{code: ok})
	if ev := e.events.last(t); ev.IP != "10.6.6.7" {
		t.Errorf("event ip %q", ev.IP)
	}
	e.wantMetric("rate_limit_rls_descriptors_total", map[string]string{"domain": "ban", "descriptor": "_banned", "code": "over_limit"}, 6)
}

func TestExemptEndpointWithoutAddress(t *testing.T) {
	e := newEnv(t, []rules.Rule{rule("p", "ex", 1, time.Hour, "path", "")}, options{exempt: rules.Exempt{Endpoints: []string{"/healthz"}}})
	checkResponse(t, "first", e.mustCall(request("ex", desc("path", "/other"))), ok, wantStatus{ok, limitOf("", 1, hour), 0, time.Hour})
	for range 3 {
		checkResponse(t, "exempt", e.mustCall(request("ex", desc("path", "/healthz"))), ok, wantStatus{code: ok})
		checkResponse(t, "not exempt", e.mustCall(request("ex", desc("path", "/other"))), overLimit,
			wantStatus{overLimit, limitOf("", 1, hour), 0, time.Hour})
	}
	e.wantMetric("rate_limit_rls_descriptors_total", map[string]string{"descriptor": "_exempt"}, 3)
}

// A rule whose failure policy is deny, undecidable without Redis: the call
// fails with Unavailable so that Envoy applies its failure_mode_deny.
func TestUnavailableWhenADenyRuleCannotBeDecided(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	deny := rule("deny", "down", 10, time.Minute, "k", "")
	deny.OnRedisFailure = rules.FailDeny
	e := newEnv(t, []rules.Rule{deny, rule("local", "down", 10, time.Minute, "l", "")}, options{redis: rdb})

	checkResponse(t, "local policy", e.mustCall(request("down", desc("l", "a"))), ok, wantStatus{ok, limitOf("", 10, minute), 9, time.Minute})
	_, err = e.call(request("down", desc("l", "a"), desc("k", "a")))
	if st := status.Convert(err); st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "rule deny cannot be decided") {
		t.Errorf("deny policy: %v, want Unavailable naming the rule", err)
	}
	if code, b := e.postJSON(`{"domain":"down","descriptors":[{"entries":[{"key":"k","value":"a"}]}]}`); code != 503 || !strings.Contains(b, "rule deny") {
		t.Errorf("/json with a deny policy: %d %s, want 503", code, b)
	}
	e.wantMetric("rate_limit_rls_requests_total", map[string]string{"domain": "down", "code": "unavailable"}, 2)
}

// 200 clients, each on its own connection, call at once against one key
// of a fixed window of 100: exactly 100 calls are admitted.
func TestConcurrentCallsAdmitExactlyTheLimit(t *testing.T) {
	const (
		clients, callsEach, limit = 200, 2, 100
		window                    = time.Hour
	)
	// Fixed windows are aligned on multiples of their length: a window
	// ending during the test would admit another 100.
	testkit.AvoidHourEnd(t)
	e := newEnv(t, []rules.Rule{rule("c", "conc", limit, window, "key", "")}, options{})
	conns := make([]rlsv3.RateLimitServiceClient, clients)
	for i := range conns {
		conns[i] = rlsv3.NewRateLimitServiceClient(e.dial(nil))
	}
	var admitted, refused, failed atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, c := range conns {
		wg.Go(func() {
			<-start
			for range callsEach {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				resp, err := c.ShouldRateLimit(ctx, request("conc", desc("key", "one")))
				cancel()
				switch {
				case err != nil:
					failed.Add(1)
				case resp.OverallCode == ok:
					admitted.Add(1)
				default:
					refused.Add(1)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if failed.Load() != 0 || admitted.Load() != limit || refused.Load() != clients*callsEach-limit {
		t.Fatalf("admitted %d, refused %d, failed %d; want %d, %d, 0", admitted.Load(), refused.Load(), failed.Load(),
			limit, clients*callsEach-limit)
	}
	if m := e.svc.Mode(); m != limiter.ModeRedis {
		t.Fatalf("mode %s: decided without Redis", m)
	}
}
