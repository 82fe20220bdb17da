package main

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// fakeRLS is Envoy's rate limit service as far as the load generator sees
// it: it records what the calls carry and answers OVER_LIMIT to clients
// whose address ends in an odd number, OK to the others. Without the
// bearer token it answers UNAUTHENTICATED; fail, when set, may answer a
// call with an error instead.
type fakeRLS struct {
	rlsv3.UnimplementedRateLimitServiceServer
	token string
	fail  func(n int64) error

	calls atomic.Int64

	mu       sync.Mutex
	peers    map[string]bool // the connections that carried calls, by client address
	domains  map[string]int
	keys     map[string]int // the descriptors' entry keys, joined by ','
	hits     map[uint32]int
	descHits map[int64]int // the descriptor's hits_addend; -1: none
	paths    map[string]int
	badCalls []string // what was wrong with a call
}

func (f *fakeRLS) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	n := f.calls.Add(1)
	md, _ := metadata.FromIncomingContext(ctx)
	if auth := md.Get("authorization"); f.token != "" && (len(auth) != 1 || auth[0] != "Bearer "+f.token) {
		return nil, status.Error(codes.Unauthenticated, "missing or invalid bearer token")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if p, ok := peer.FromContext(ctx); ok {
		f.peers[p.Addr.String()] = true
	}
	f.domains[req.GetDomain()]++
	f.hits[req.GetHitsAddend()]++
	if len(req.GetDescriptors()) != 1 {
		f.badCalls = append(f.badCalls, "descriptors: "+strconv.Itoa(len(req.GetDescriptors())))
		return nil, status.Error(codes.InvalidArgument, "one descriptor expected")
	}
	descHits := int64(-1)
	if h := req.GetDescriptors()[0].GetHitsAddend(); h != nil {
		descHits = int64(h.GetValue())
	}
	f.descHits[descHits]++
	var keys []string
	ip := ""
	for _, e := range req.GetDescriptors()[0].GetEntries() {
		keys = append(keys, e.GetKey())
		switch e.GetKey() {
		case "remote_address":
			ip = e.GetValue()
			if _, err := netip.ParseAddr(ip); err != nil {
				f.badCalls = append(f.badCalls, "remote_address "+ip)
			}
		case "path":
			f.paths[e.GetValue()]++
		}
	}
	f.keys[strings.Join(keys, ",")]++
	if f.fail != nil {
		if err := f.fail(n); err != nil {
			return nil, err
		}
	}
	code := rlsv3.RateLimitResponse_OK
	if last, _ := strconv.Atoi(ip[strings.LastIndexByte(ip, '.')+1:]); last%2 == 1 {
		code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	return &rlsv3.RateLimitResponse{OverallCode: code}, nil
}

// reset empties what f records.
func (f *fakeRLS) reset() {
	f.peers, f.domains, f.keys, f.hits, f.paths = map[string]bool{}, map[string]int{}, map[string]int{}, map[uint32]int{}, map[string]int{}
	f.descHits = map[int64]int{}
}

// checkRunAgainstFake checks a run of 2000 requests of -cost 3 against
// fake: each call carried domain, the entry keys and path, over conns
// connections; every one came back allowed or denied (both seen) and
// counted by its reason. It returns the allowed and denied counts.
func checkRunAgainstFake(t *testing.T, fake *fakeRLS, s map[string]string, domain, keys, path string, conns int) (allowed, denied float64) {
	t.Helper()
	requests := num(t, s, "requests")
	if requests != 2000 || fake.calls.Load() != 2000 {
		t.Fatalf("requests = %v, server saw %d; want 2000", requests, fake.calls.Load())
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if len(fake.badCalls) > 0 || fake.domains[domain] != 2000 || fake.keys[keys] != 2000 ||
		fake.hits[3] != 2000 || fake.paths[path] != 2000 {
		t.Fatalf("calls: domains %v, entry keys %v, hits %v, paths %v, bad %v", fake.domains, fake.keys, fake.hits, fake.paths, fake.badCalls)
	}
	if got := len(fake.peers); got != conns {
		t.Errorf("%d connections, want %d", got, conns)
	}
	allowed, denied = num(t, s, "allowed"), num(t, s, "denied")
	if allowed == 0 || denied == 0 || allowed+denied != requests || num(t, s, "errors") != 0 {
		t.Fatalf("allowed %v + denied %v, errors %v; want both verdicts, %v in all, no error", allowed, denied, s["errors"], requests)
	}
	if num(t, s, "reason_ok") != allowed || num(t, s, "reason_over_limit") != denied || num(t, s, "normal_denied") != denied {
		t.Errorf("reasons or profiles do not add up: %v", s)
	}
	return allowed, denied
}

// startFakeRLS serves f on loopback and returns its address.
func startFakeRLS(t *testing.T, f *fakeRLS) string {
	t.Helper()
	f.reset()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(srv, f)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return ln.Addr().String()
}

func TestGRPCRunAgainstFakeRLS(t *testing.T) {
	fake := &fakeRLS{token: "s3cret"}
	addr := startFakeRLS(t, fake)
	stdout, s, err := runLoadgen(t, context.Background(), "-protocol", "grpc", "-grpc-addr", addr, "-token", "s3cret",
		"-workers", "8", "-grpc-conns", "3", "-requests", "2000", "-duration", "0", "-keys", "1000", "-progress", "50ms",
		"-domain", "edge", "-entries", "remote_address,path", "-endpoint", "/api/books/17", "-cost", "3")
	if err != nil {
		t.Fatal(err)
	}
	if allowed, denied := checkRunAgainstFake(t, fake, s, "edge", "remote_address,path", "/api/books/17", 3); num(t, s, "code_OK") != allowed+denied {
		t.Errorf("codes do not add up: %v", s)
	}
	if p50, p99, maxMs := num(t, s, "p50_ms"), num(t, s, "p99_ms"), num(t, s, "max_ms"); p50 <= 0 || p50 > p99 || p99 > maxMs {
		t.Errorf("latency p50 %v p99 %v max %v out of order", p50, p99, maxMs)
	}
	if s["protocol"] != "grpc" || s["domain"] != "'edge'" || num(t, s, "conns") != 3 || num(t, s, "workers") != 8 {
		t.Errorf("summary header: %v", s)
	}
	for _, want := range []string{"requests   2000 (", "8 concurrent calls over 3 HTTP/2 connections", "codes      OK=2000", "domain edge", "latency    p50="} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q", want)
		}
	}
}

// With -debit-after, each request is a check of descriptor hits_addend 0
// and, when admitted, a debit of the given hits_addend: the server sees
// one call per request plus one per admitted request, and the summary
// counts requests by their checks.
func TestGRPCDebitAfter(t *testing.T) {
	fake := &fakeRLS{}
	addr := startFakeRLS(t, fake)
	_, s, err := runLoadgen(t, context.Background(), "-protocol", "grpc", "-grpc-addr", addr,
		"-workers", "4", "-requests", "1000", "-duration", "0", "-keys", "100", "-progress", "0", "-debit-after", "600")
	if err != nil {
		t.Fatal(err)
	}
	allowed, denied := num(t, s, "allowed"), num(t, s, "denied")
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if allowed == 0 || denied == 0 || allowed+denied != 1000 || num(t, s, "errors") != 0 {
		t.Fatalf("allowed %v, denied %v, errors %v: want both verdicts, 1000 in all", allowed, denied, s["errors"])
	}
	if got := fake.calls.Load(); got != 1000+int64(allowed) || fake.descHits[0] != 1000 || fake.descHits[600] != int(allowed) {
		t.Fatalf("%d calls, descriptor hits_addend %v; want 1000 checks of 0 and %v debits of 600", got, fake.descHits, allowed)
	}
	if _, _, err := runLoadgen(t, context.Background(), "-protocol", "http", "-debit-after", "5"); err == nil {
		t.Error("-debit-after accepted over http")
	}
}

// TestGRPCDefaults: one remote_address entry in domain bench, no token,
// hits_addend left out; open loop works as over HTTP.
func TestGRPCDefaults(t *testing.T) {
	fake := &fakeRLS{}
	addr := startFakeRLS(t, fake)
	_, s, err := runLoadgen(t, context.Background(), "-protocol", "grpc", "-grpc-addr", addr, "-rate", "400",
		"-duration", "250ms", "-workers", "4", "-progress", "0", "-mix", "normal=1,bursty=1,scanner=1,bruteforce=1")
	if err != nil {
		t.Fatal(err)
	}
	if n := num(t, s, "requests"); n < 80 || n > 120 || num(t, s, "errors") != 0 {
		t.Fatalf("%v requests, %v errors; want about 100, none", n, s["errors"])
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	calls := int(fake.calls.Load())
	if len(fake.badCalls) > 0 || fake.domains["bench"] != calls || fake.keys["remote_address"] != calls || fake.hits[0] != calls {
		t.Fatalf("calls: domains %v, entry keys %v, hits %v, bad %v", fake.domains, fake.keys, fake.hits, fake.badCalls)
	}
	if got := len(fake.peers); got != 4 {
		t.Errorf("%d connections, want the default 4", got)
	}
}

func TestGRPCErrors(t *testing.T) {
	t.Run("status", func(t *testing.T) {
		fake := &fakeRLS{fail: func(n int64) error {
			switch n % 10 {
			case 0:
				return status.Error(codes.Internal, "injected")
			case 5:
				return status.Error(codes.Unavailable, "injected")
			}
			return nil
		}}
		addr := startFakeRLS(t, fake)
		stdout, s, err := runLoadgen(t, context.Background(), "-protocol", "grpc", "-grpc-addr", addr,
			"-requests", "500", "-duration", "0", "-workers", "2", "-progress", "0")
		if err == nil || !strings.Contains(err.Error(), "-max-errors") || exitCode(err, new(bytes.Buffer)) != 1 {
			t.Fatalf("error = %v, want the error ratio over -max-errors (exit 1)", err)
		}
		if num(t, s, "errors") != 100 || num(t, s, "errors_grpc_status") != 50 || num(t, s, "errors_unavailable") != 50 ||
			num(t, s, "code_INTERNAL") != 50 || num(t, s, "code_UNAVAILABLE") != 50 || num(t, s, "code_OK") != 400 ||
			num(t, s, "allowed")+num(t, s, "denied") != 400 || !strings.Contains(stdout, "grpc_status=50") {
			t.Fatalf("summary: %v", s)
		}
	})
	t.Run("token", func(t *testing.T) {
		addr := startFakeRLS(t, &fakeRLS{token: "s3cret"})
		_, s, err := runLoadgen(t, context.Background(), "-protocol", "grpc", "-grpc-addr", addr, "-token", "wrong",
			"-requests", "50", "-duration", "0", "-workers", "2", "-progress", "0")
		if err == nil || num(t, s, "code_UNAUTHENTICATED") != 50 || num(t, s, "errors_grpc_status") != 50 {
			t.Fatalf("error %v, summary %v; want 50 UNAUTHENTICATED", err, s)
		}
	})
	t.Run("unreachable", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		err = run(context.Background(), []string{"-protocol", "grpc", "-grpc-addr", addr, "-duration", "1s"}, new(bytes.Buffer), new(bytes.Buffer))
		if err == nil || !strings.Contains(err.Error(), "cannot reach the limiter at "+addr+" (-grpc-addr") {
			t.Fatalf("error = %v, want one naming -grpc-addr %s", err, addr)
		}
	})
}

func TestGRPCUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"-protocol", "h2"}, `-protocol "h2"`},
		{[]string{"-protocol", "grpc", "-url", "http://127.0.0.1:8080"}, "-url does not apply to -protocol grpc"},
		{[]string{"-domain", "x"}, "-domain does not apply to -protocol http"},
		{[]string{"-grpc-conns", "2"}, "-grpc-conns does not apply to -protocol http"},
		{[]string{"-protocol", "grpc", "-grpc-addr", "8083"}, "-grpc-addr"},
		{[]string{"-protocol", "grpc", "-grpc-conns", "0"}, "-grpc-conns 0"},
		{[]string{"-protocol", "grpc", "-domain", ""}, "-domain"},
		{[]string{"-protocol", "grpc", "-entries", "remote_address,user"}, `unknown entry "user"`},
		{[]string{"-protocol", "grpc", "-entries", "path,path"}, `entry "path" given twice`},
		{[]string{"-protocol", "json", "-grpc-addr", "127.0.0.1:8083"}, "-grpc-addr does not apply to -protocol json"},
		{[]string{"-protocol", "json", "-batch", "10"}, "-batch does not apply to -protocol json"},
		{[]string{"-protocol", "grpc", "-batch", "10"}, "-batch does not apply to -protocol grpc"},
		{[]string{"-protocol", "json", "-entries", "user"}, `unknown entry "user"`},
		{[]string{"-protocol", "json", "-url", "https://limiter"}, "TLS is not supported"},
		{[]string{"-protocol", "json", "-domain", ""}, "-domain"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stderr bytes.Buffer
			err := run(context.Background(), tt.args, new(bytes.Buffer), &stderr)
			if code := exitCode(err, &stderr); code != 2 || !strings.Contains(stderr.String(), tt.want) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, stderr.String(), tt.want)
			}
		})
	}
}

// TestGRPCSenderReusesItsMessages: a worker's request message is built
// once; per call only the entry values that changed are set.
func TestGRPCSenderReusesItsMessages(t *testing.T) {
	cfg := config{timeout: 5e9, domain: "bench", entries: []string{"remote_address", "path", "method"}}
	s := newGRPCSender(nil, &cfg)
	d := Draw{IP: []byte("100.64.0.1"), Endpoint: []byte("/a"), Method: "GET", Cost: 7}
	s.fill(&d)
	if n := testing.AllocsPerRun(100, func() { s.fill(&d) }); n != 0 {
		t.Fatalf("%v allocations to fill in unchanged values", n)
	}
	entries := s.req.Descriptors[0].Entries
	if len(s.req.Descriptors) != 1 || len(entries) != 3 || s.req.Domain != "bench" || s.req.HitsAddend != 7 ||
		entries[0].Key != "remote_address" || entries[0].Value != "100.64.0.1" ||
		entries[1].Key != "path" || entries[1].Value != "/a" || entries[2].Key != "method" || entries[2].Value != "GET" {
		t.Fatalf("request %v", &s.req)
	}
	d.IP = []byte("100.64.0.2")
	s.fill(&d)
	if entries[0].Value != "100.64.0.2" {
		t.Fatalf("remote_address %q after a new draw", entries[0].Value)
	}
}
