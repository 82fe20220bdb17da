package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// startFakeRLSJSON serves f's decisions at POST /json as envoyproxy/
// ratelimit documents it: the request in proto3 JSON (unknown fields
// refused), the response likewise, 200 when OK and 429 when OVER_LIMIT. It
// returns the server's base URL.
func startFakeRLSJSON(t *testing.T, f *fakeRLS) string {
	t.Helper()
	f.reset()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		var req rlsv3.RateLimitRequest
		if err == nil {
			err = protojson.Unmarshal(body, &req)
		}
		if r.Method != http.MethodPost || r.URL.Path != "/json" || err != nil {
			f.mu.Lock()
			f.badCalls = append(f.badCalls, r.Method+" "+r.URL.Path+": "+string(body))
			f.mu.Unlock()
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		ctx := metadata.NewIncomingContext(r.Context(), metadata.Pairs("authorization", r.Header.Get("Authorization")))
		if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
			ctx = peer.NewContext(ctx, &peer.Peer{Addr: net.TCPAddrFromAddrPort(ap)})
		}
		resp, err := f.ShouldRateLimit(ctx, &req)
		switch {
		case status.Code(err) == codes.Unauthenticated:
			http.Error(w, "unauthenticated", http.StatusUnauthorized)
			return
		case err != nil:
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		out, _ := protojson.Marshal(resp)
		w.Header().Set("Content-Type", "application/json")
		if resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
			w.WriteHeader(http.StatusTooManyRequests)
		}
		_, _ = w.Write(out)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestJSONRunAgainstFakeRLS: with -protocol json every worker posts the
// domain, entries and hits_addend of its draws to /json over a connection
// of its own, and the answers count as gRPC mode counts its calls.
func TestJSONRunAgainstFakeRLS(t *testing.T) {
	fake := &fakeRLS{token: "s3cret"}
	url := startFakeRLSJSON(t, fake)
	const endpoint = `/api/books/"17"` // escaped in the body, decoded by the server
	stdout, s, err := runLoadgen(t, context.Background(), "-protocol", "json", "-url", url, "-token", "s3cret",
		"-workers", "8", "-requests", "2000", "-duration", "0", "-keys", "1000", "-progress", "50ms",
		"-domain", `edge "1"`, "-entries", "remote_address,path,method", "-endpoint", endpoint, "-cost", "3")
	if err != nil {
		t.Fatal(err)
	}
	// one connection per worker
	allowed, denied := checkRunAgainstFake(t, fake, s, `edge "1"`, "remote_address,path,method", endpoint, 8)
	if num(t, s, "status_200") != allowed || num(t, s, "status_429") != denied {
		t.Errorf("statuses do not add up: %v", s)
	}
	if s["protocol"] != "json" || s["domain"] != `'edge "1"'` || num(t, s, "conns") != 8 {
		t.Errorf("summary header: %v", s)
	}
	for _, want := range []string{"/json, domain edge", "8 connections", "requests   2000 ("} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q", want)
		}
	}
}

// TestJSONDefaults: one remote_address entry in domain bench, hits_addend
// left out at cost 1.
func TestJSONDefaults(t *testing.T) {
	fake := &fakeRLS{}
	url := startFakeRLSJSON(t, fake)
	_, s, err := runLoadgen(t, context.Background(), "-protocol", "json", "-url", url+"/", "-requests", "200",
		"-duration", "0", "-workers", "2", "-progress", "0")
	if err != nil {
		t.Fatal(err)
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if len(fake.badCalls) > 0 || fake.domains["bench"] != 200 || fake.keys["remote_address"] != 200 || fake.hits[0] != 200 {
		t.Fatalf("calls: domains %v, entry keys %v, hits %v, bad %v", fake.domains, fake.keys, fake.hits, fake.badCalls)
	}
	if num(t, s, "errors") != 0 {
		t.Errorf("errors: %v", s)
	}
}

func TestClassifyRLSJSON(t *testing.T) {
	tests := []struct {
		name    string
		res     response
		allowed bool
		reason  reason
		err     errClass
	}{
		{"ok", response{status: 200, body: []byte(`{"overallCode":"OK","statuses":[{"code":"OK"}]}`)}, true, reasonOK, errNone},
		{"ok spaced", response{status: 200, body: []byte(`{"overallCode" : "OK"}`)}, true, reasonOK, errNone},
		{"over limit", response{status: 429, body: []byte(`{"overallCode":"OVER_LIMIT"}`)}, false, reasonOverLimit, errNone},
		{"200 without a code", response{status: 200, body: []byte(`{"statuses":[]}`)}, false, reasonOther, errBody},
		{"200 but over limit", response{status: 200, body: []byte(`{"overallCode":"OVER_LIMIT"}`)}, false, reasonOther, errBody},
		{"200 with OKAY", response{status: 200, body: []byte(`{"overallCode":"OKAY"}`)}, false, reasonOther, errBody},
		{"bad request", response{status: 400, body: []byte(`{"error":"x"}`)}, false, reasonOther, errStatus4xx},
		{"unavailable", response{status: 503}, false, reasonOther, errStatus5xx},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var o outcome
			classifyRLSJSON(&o, tt.res)
			if !o.answered || o.status != tt.res.status || o.allowed != tt.allowed || o.reason != tt.reason || o.err != tt.err {
				t.Fatalf("outcome %+v; want allowed %v, reason %v, error class %v", o, tt.allowed, tt.reason, tt.err)
			}
		})
	}
}

// TestRLSJSONBodyDoesNotAllocate: the body is written into the sender's
// buffer.
func TestRLSJSONBodyDoesNotAllocate(t *testing.T) {
	r := newRLSJSON("bench", []string{entryRemoteAddress, entryPath, entryMethod})
	d := Draw{IP: []byte("100.64.0.7"), Endpoint: []byte("/api/books/17"), Method: "GET", Cost: 2}
	buf := make([]byte, 0, 512)
	if n := testing.AllocsPerRun(100, func() { buf = r.appendBody(&d, buf[:0]) }); n != 0 {
		t.Errorf("%v allocations per body, want 0", n)
	}
	var req rlsv3.RateLimitRequest
	if err := protojson.Unmarshal(buf, &req); err != nil || req.GetHitsAddend() != 2 ||
		!bytes.Contains(buf, []byte(`{"key":"path","value":"/api/books/17"}`)) {
		t.Fatalf("body %s: %v, hits %d", buf, err, req.GetHitsAddend())
	}
}
