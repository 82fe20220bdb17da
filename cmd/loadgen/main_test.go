package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fakeLimiter mimics the limiter's POST /v1/check and POST
// /v1/check/batch: it decodes the body as strictly as the limiter and
// answers 200 with a decision, or with each check's. Normal clients with an
// odd last octet are denied, scanners are banned, brute forcers rate
// limited, bursty clients allowed.
type fakeLimiter struct {
	requests atomic.Int64  // HTTP requests
	checks   atomic.Int64  // checks in them, one per /v1/check
	allowed  atomic.Int64  // checks answered allowed
	delay    time.Duration // before each answer
	// status, when set, may answer some requests with another status.
	status func(n int64) int
	close  bool // answer Connection: close
}

func (f *fakeLimiter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := f.requests.Add(1)
	batch := r.URL.Path == "/v1/check/batch"
	if r.Method != http.MethodPost || (r.URL.Path != "/v1/check" && !batch) || r.Header.Get("Content-Type") != "application/json" {
		http.Error(w, `{"error":"not found"}`, http.StatusNotFound)
		return
	}
	checks, ok := decodeChecks(r, batch)
	if !ok {
		http.Error(w, `{"error":"invalid"}`, http.StatusBadRequest)
		return
	}
	if f.delay > 0 {
		time.Sleep(f.delay)
	}
	if f.close {
		w.Header().Set("Connection", "close")
	}
	if f.status != nil {
		if s := f.status(n); s != http.StatusOK {
			http.Error(w, `{"error":"injected"}`, s)
			return
		}
	}
	f.checks.Add(int64(len(checks)))
	w.Header().Set("Content-Type", "application/json")
	if !batch {
		_, _ = w.Write(append(f.decide(checks[0], []byte{'{'}), "}\n"...))
		return
	}
	out := []byte(`{"decisions":[`)
	for i, b := range checks {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(f.decide(b, append(out, `{"status":200,`...)), '}')
	}
	_, _ = w.Write(append(out, "]}\n"...))
}

// decodeChecks reads the checks of a request, unknown fields rejected.
func decodeChecks(r *http.Request, batch bool) ([]body, bool) {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	var checks []body
	if batch {
		var b struct{ Checks []body }
		if dec.Decode(&b) != nil || len(b.Checks) == 0 || len(b.Checks) > maxBatch {
			return nil, false
		}
		checks = b.Checks
	} else {
		var b body
		if dec.Decode(&b) != nil {
			return nil, false
		}
		checks = []body{b}
	}
	for _, b := range checks {
		if b.IP == "" || b.Endpoint == "" {
			return nil, false
		}
	}
	return checks, true
}

// decide appends the members of the decision on b to dst.
func (f *fakeLimiter) decide(b body, dst []byte) []byte {
	allowed, reason := true, "ok"
	switch {
	case strings.HasPrefix(b.IP, "203.0.113."):
		allowed, reason = false, "banned"
	case strings.HasPrefix(b.IP, "192.0.2."):
		allowed, reason = false, "rate_limited"
	case strings.HasPrefix(b.IP, "100.64."):
		last, _ := strconv.Atoi(b.IP[strings.LastIndexByte(b.IP, '.')+1:])
		if last%2 == 1 {
			allowed, reason = false, "rate_limited"
		}
	}
	if allowed {
		f.allowed.Add(1)
	}
	return append(dst, `"allowed":`+strconv.FormatBool(allowed)+`,"reason":"`+reason+`","rule_id":"r","limit":5`...)
}

// startFake serves f and returns the base URL.
func startFake(t *testing.T, f *fakeLimiter) string {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return srv.URL
}

// runLoadgen runs run() with args, returning its stdout, the parsed
// summary file and its error.
func runLoadgen(t *testing.T, ctx context.Context, args ...string) (string, map[string]string, error) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "summary.env")
	var stdout, stderr bytes.Buffer
	err := run(ctx, append(args, "-summary-file", file), &stdout, &stderr)
	t.Logf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	summary := map[string]string{}
	if data, readErr := os.ReadFile(file); readErr == nil {
		for line := range strings.Lines(string(data)) {
			k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
			if !ok {
				t.Fatalf("summary line %q is not key=value", line)
			}
			summary[k] = v
		}
	}
	return stdout.String(), summary, err
}

// num reads a numeric summary value.
func num(t *testing.T, s map[string]string, key string) float64 {
	t.Helper()
	v, ok := s[key]
	if !ok {
		t.Fatalf("summary has no %s", key)
	}
	if strings.ContainsAny(v, "eE") {
		t.Fatalf("%s=%s is in exponent form", key, v)
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		t.Fatalf("%s=%s: %v", key, v, err)
	}
	return f
}

func TestRunMixAgainstFakeLimiter(t *testing.T) {
	fake := &fakeLimiter{}
	url := startFake(t, fake)
	stdout, s, err := runLoadgen(t, context.Background(), "-url", url, "-workers", "4", "-requests", "3000",
		"-duration", "0", "-mix", "normal=70,bursty=10,scanner=10,bruteforce=10", "-progress", "50ms", "-keys", "1000")
	if err != nil {
		t.Fatal(err)
	}
	requests := num(t, s, "requests")
	if requests != 3000 || fake.requests.Load() != 3000 {
		t.Fatalf("requests = %v, server saw %d; want 3000", requests, fake.requests.Load())
	}
	if got := num(t, s, "allowed") + num(t, s, "denied") + num(t, s, "errors"); got != requests || num(t, s, "errors") != 0 {
		t.Fatalf("allowed + denied + errors = %v (errors %v), want %v and no error", got, num(t, s, "errors"), requests)
	}
	var sum float64
	for p := range numProfiles {
		n := num(t, s, p.String()+"_requests")
		if n < 150 {
			t.Errorf("%s: %v requests, want about its share of 3000", p, n)
		}
		sum += n
		if got := num(t, s, p.String()+"_allowed") + num(t, s, p.String()+"_denied") + num(t, s, p.String()+"_errors"); got != n {
			t.Errorf("%s: allowed + denied + errors = %v, want %v", p, got, n)
		}
	}
	if sum != requests {
		t.Fatalf("profiles add up to %v, want %v", sum, requests)
	}
	if num(t, s, "scanner_banned") != num(t, s, "scanner_requests") || num(t, s, "bursty_denied") != 0 ||
		num(t, s, "bruteforce_allowed") != 0 || num(t, s, "normal_allowed") == 0 || num(t, s, "normal_denied") == 0 {
		t.Errorf("verdicts per profile do not follow the fake limiter's: %v", s)
	}
	if num(t, s, "reason_banned") != num(t, s, "scanner_banned") || num(t, s, "status_200") != requests {
		t.Errorf("reasons or statuses do not add up: %v", s)
	}
	if p50, p99, maxMs := num(t, s, "p50_ms"), num(t, s, "p99_ms"), num(t, s, "max_ms"); p50 <= 0 || p50 > p99 || p99 > maxMs {
		t.Errorf("latency p50 %v p99 %v max %v out of order", p50, p99, maxMs)
	}
	for _, want := range []string{"requests   3000 (", "errors     0 (0.00%)", "scanner ", "latency    p50="} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q", want)
		}
	}
}

func TestSummaryFileIsShellSourceable(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	url := startFake(t, &fakeLimiter{})
	file := filepath.Join(t.TempDir(), "it's.env")
	if err := run(context.Background(), []string{"-url", url + "/", "-requests", "50", "-workers", "2", "-progress", "0", "-summary-file", file}, new(bytes.Buffer), new(bytes.Buffer)); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(sh, "-c", `set -eu; . "$1"; echo "$requests $mode $url $p999_ms"`, "sh", file).CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "50 closed "+url+"/v1/check ") {
		t.Fatalf("sourcing the summary: %v: %s", err, out)
	}
}

func TestRunConnectionClose(t *testing.T) {
	fake := &fakeLimiter{close: true}
	url := startFake(t, fake)
	_, s, err := runLoadgen(t, context.Background(), "-url", url, "-requests", "200", "-workers", "2", "-progress", "0")
	if err != nil {
		t.Fatal(err)
	}
	if num(t, s, "requests") != 200 || num(t, s, "errors") != 0 || fake.requests.Load() != 200 {
		t.Fatalf("with Connection: close: %v requests, %v errors, server saw %d", s["requests"], s["errors"], fake.requests.Load())
	}
}

func TestRunWarmupIsLeftOut(t *testing.T) {
	fake := &fakeLimiter{}
	url := startFake(t, fake)
	_, s, err := runLoadgen(t, context.Background(), "-url", url, "-rate", "200", "-warmup", "250ms", "-duration", "250ms", "-workers", "2", "-progress", "100ms")
	if err != nil {
		t.Fatal(err)
	}
	measured, sent := num(t, s, "requests"), float64(fake.requests.Load())
	if measured < 40 || measured > 60 || sent < 90 || sent > 110 {
		t.Fatalf("measured %v of %v sent; want about 50 of 100", measured, sent)
	}
}

func TestRunErrorRatio(t *testing.T) {
	url := startFake(t, &fakeLimiter{status: func(n int64) int {
		if n%5 == 0 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	}})
	stdout, s, err := runLoadgen(t, context.Background(), "-url", url, "-requests", "500", "-workers", "2", "-progress", "0")
	if err == nil || !strings.Contains(err.Error(), "-max-errors") || exitCode(err, new(bytes.Buffer)) != 1 {
		t.Fatalf("error = %v, want the error ratio over -max-errors (exit 1)", err)
	}
	if num(t, s, "errors_status_5xx") != 100 || num(t, s, "status_503") != 100 || !strings.Contains(stdout, "status_5xx=100") {
		t.Fatalf("summary: %v", s)
	}
	if _, _, err := runLoadgen(t, context.Background(), "-url", url, "-requests", "500", "-workers", "2", "-progress", "0", "-max-errors", "0.5"); err != nil {
		t.Fatalf("with -max-errors 0.5: %v", err)
	}
}

func TestRunUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var stderr bytes.Buffer
	err = run(context.Background(), []string{"-url", "http://" + addr, "-duration", "1s"}, new(bytes.Buffer), &stderr)
	if err == nil || !strings.Contains(err.Error(), "cannot reach the limiter at "+addr) {
		t.Fatalf("error = %v, want one naming %s", err, addr)
	}
	if code := exitCode(err, &stderr); code != 1 || !strings.Contains(stderr.String(), addr) {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
}

func TestRunStopsOnCancel(t *testing.T) {
	url := startFake(t, &fakeLimiter{delay: time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	begin := time.Now()
	stdout, s, err := runLoadgen(t, ctx, "-url", url, "-duration", "1m", "-workers", "4", "-progress", "0")
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(begin); took > 3*time.Second {
		t.Fatalf("run took %s after cancellation", took)
	}
	if s["interrupted"] != "1" || num(t, s, "requests") == 0 || num(t, s, "errors") != 0 || !strings.Contains(stdout, "(interrupted)") {
		t.Fatalf("summary after cancel: %v", s)
	}
}

func TestRunUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown flag", []string{"-nope"}, "flag provided but not defined"},
		{"argument", []string{"extra"}, `unexpected argument "extra"`},
		{"bad mix", []string{"-mix", "normal=90,attack=10"}, `-mix: unknown profile "attack"`},
		{"bad url", []string{"-url", "https://x"}, "-url:"},
		{"no end", []string{"-duration", "0"}, "-duration 0 needs -requests"},
		{"workers", []string{"-workers", "0"}, "-workers 0"},
		{"key order", []string{"-key-order", "shuffled"}, `-key-order "shuffled"`},
		{"ip base", []string{"-ip-base", "::1"}, "-ip-base"},
		{"keys past the address space", []string{"-ip-base", "255.255.255.0", "-keys", "1000"}, "past 255.255.255.255"},
		{"users", []string{"-users", "2"}, "-users 2"},
		{"endpoint", []string{"-endpoint", "api/books"}, "-endpoint"},
		{"attackers", []string{"-attackers", "300"}, "-attackers 300"},
		{"max errors", []string{"-max-errors", "-0.1"}, "-max-errors"},
		{"cost", []string{"-cost", "0"}, "-cost 0"},
		{"no batch", []string{"-batch", "0"}, "-batch 0: want 1 to 100"},
		{"batch too large", []string{"-batch", "101"}, "-batch 101: want 1 to 100"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			err := run(context.Background(), tt.args, new(bytes.Buffer), &stderr)
			var usage *usageError
			if !errors.As(err, &usage) {
				t.Fatalf("error = %v, want a usage error", err)
			}
			code := exitCode(err, &stderr)
			if code != 2 || !strings.Contains(stderr.String(), tt.want) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, stderr.String(), tt.want)
			}
		})
	}
	for _, arg := range []string{"-h", "-help", "help"} {
		t.Run(arg, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), []string{arg}, &stdout, &stderr)
			if exitCode(err, &stderr) != 0 || !strings.Contains(stdout.String(), "-mix") || !strings.HasPrefix(stdout.String(), "Usage: loadgen") ||
				stderr.Len() > 0 {
				t.Fatalf("%s: %v, stdout %q, stderr %q", arg, err, stdout.String(), stderr.String())
			}
		})
	}
}

func TestSeveralURLsShareTheWorkers(t *testing.T) {
	a, b := &fakeLimiter{}, &fakeLimiter{}
	urlA, urlB := startFake(t, a), startFake(t, b)
	_, s, err := runLoadgen(t, context.Background(), "-url", urlA+","+urlB, "-workers", "4", "-requests", "400",
		"-duration", "0", "-progress", "0")
	if err != nil {
		t.Fatal(err)
	}
	if num(t, s, "requests") != 400 || a.requests.Load()+b.requests.Load() != 400 {
		t.Fatalf("requests = %v, servers saw %d + %d; want 400", num(t, s, "requests"), a.requests.Load(), b.requests.Load())
	}
	if a.requests.Load() == 0 || b.requests.Load() == 0 {
		t.Fatalf("servers saw %d and %d requests: want both to get some", a.requests.Load(), b.requests.Load())
	}
	if want := "'" + urlA + "/v1/check," + urlB + "/v1/check'"; s["url"] != want {
		t.Errorf("url = %s, want %s", s["url"], want)
	}
	if _, _, err := runLoadgen(t, context.Background(), "-url", urlA+",ftp://x", "-requests", "1", "-duration", "0"); err == nil ||
		!strings.Contains(err.Error(), "-url:") {
		t.Errorf("a bad second URL: error %v, want one naming -url", err)
	}
}
