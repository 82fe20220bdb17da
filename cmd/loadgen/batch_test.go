package main

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestBatchRunAgainstFakeLimiter(t *testing.T) {
	fake := &fakeLimiter{}
	url := startFake(t, fake)
	stdout, s, err := runLoadgen(t, context.Background(), "-url", url, "-batch", "10", "-workers", "4", "-requests", "3000",
		"-duration", "0", "-mix", "normal=70,bursty=10,scanner=10,bruteforce=10", "-progress", "50ms", "-keys", "1000")
	if err != nil {
		t.Fatal(err)
	}
	if fake.requests.Load() != 300 || fake.checks.Load() != 3000 {
		t.Fatalf("server saw %d requests of %d checks; want 300 of 3000 in all", fake.requests.Load(), fake.checks.Load())
	}
	requests := num(t, s, "requests")
	if requests != 3000 || num(t, s, "batch") != 10 || num(t, s, "errors") != 0 {
		t.Fatalf("summary: %v checks in batches of %v, %v errors; want 3000 in batches of 10, no error", requests, s["batch"], s["errors"])
	}
	if allowed := num(t, s, "allowed"); allowed != float64(fake.allowed.Load()) || allowed+num(t, s, "denied") != requests {
		t.Fatalf("allowed %v, denied %v; the server allowed %d of %v", allowed, s["denied"], fake.allowed.Load(), requests)
	}
	var sum float64
	for p := range numProfiles {
		sum += num(t, s, p.String()+"_requests")
	}
	if sum != requests || num(t, s, "scanner_banned") != num(t, s, "scanner_requests") || num(t, s, "scanner_requests") == 0 ||
		num(t, s, "reason_banned") != num(t, s, "scanner_banned") || num(t, s, "status_200") != requests {
		t.Errorf("profiles, reasons or statuses do not follow the fake's answers: %v", s)
	}
	for _, want := range []string{"10 checks per request (POST /v1/check/batch)", "requests   3000 checks (", "in 300 HTTP requests of 10", "/v1/check/batch"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q", want)
		}
	}
}

// TestBatchOpenLoopCountsChecks holds -rate and -requests to counting
// checks: the schedule sends a tenth as many requests.
func TestBatchOpenLoopCountsChecks(t *testing.T) {
	fake := &fakeLimiter{}
	url := startFake(t, fake)
	_, s, err := runLoadgen(t, context.Background(), "-url", url, "-batch", "10", "-rate", "100000", "-requests", "205",
		"-duration", "0", "-workers", "2", "-progress", "0")
	if err != nil {
		t.Fatal(err)
	}
	// 205 checks are 21 requests (rounded up): every request carries 10.
	if fake.requests.Load() != 21 || num(t, s, "requests") != 210 || num(t, s, "target_rate") != 100000 || s["mode"] != "open" {
		t.Fatalf("server saw %d requests; summary %v checks, target %v, mode %v", fake.requests.Load(), s["requests"], s["target_rate"], s["mode"])
	}
}

func TestBatchErrorsCountPerCheck(t *testing.T) {
	url := startFake(t, &fakeLimiter{status: func(n int64) int {
		if n%5 == 0 {
			return 503
		}
		return 200
	}})
	_, s, err := runLoadgen(t, context.Background(), "-url", url, "-batch", "4", "-requests", "400", "-duration", "0",
		"-workers", "1", "-progress", "0", "-max-errors", "1")
	if err != nil {
		t.Fatal(err)
	}
	if num(t, s, "errors_status_5xx") != 80 || num(t, s, "status_503") != 80 || num(t, s, "requests") != 400 {
		t.Fatalf("every fifth batch of 4 answered 503: want 80 checks in error of 400, got %v", s)
	}
}

func TestBatchBody(t *testing.T) {
	tr := testTraffic(Mix{5, 1, 1, 1}, nil)
	rng := rand.New(rand.NewPCG(1, 2))
	draws := make([]Draw, 7)
	var want []body
	for i := range draws {
		tr.Next(rng, &draws[i])
		want = append(want, decodeBody(t, draws[i].AppendJSON(nil)))
	}
	b := appendBatchBody(draws, nil)
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	var got struct{ Checks []body }
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("batch body %s: %v", b, err)
	}
	if len(got.Checks) != len(want) {
		t.Fatalf("%d checks, want %d", len(got.Checks), len(want))
	}
	for i := range want {
		if got.Checks[i] != want[i] {
			t.Errorf("check %d = %+v, want %+v", i, got.Checks[i], want[i])
		}
	}
	buf := make([]byte, 0, 4096)
	if n := testing.AllocsPerRun(100, func() { buf = appendBatchBody(draws, buf[:0]) }); n != 0 {
		t.Errorf("%v allocations per body with room, want 0", n)
	}
}

func TestClassifyBatch(t *testing.T) {
	type want struct {
		allowed bool
		reason  reason
		status  int
		err     errClass
	}
	ok := want{true, reasonOK, 200, errNone}
	limited := want{false, reasonRateLimited, 200, errNone}
	tests := []struct {
		name   string
		status int
		body   string
		want   []want
	}{
		{"in order", 200, `{"decisions":[{"status":200,"allowed":true,"reason":"ok"},{"status":200,"allowed":false,"reason":"rate_limited"}]}`,
			[]want{ok, limited}},
		{"an entry refused", 200,
			`{"decisions":[{"status":503,"error":"rule {x} \"cannot\" be decided"},{"status":200,"allowed":true,"reason":"ok"}]}`,
			[]want{{false, reasonOther, 503, errStatus5xx}, ok}},
		{"fewer decisions than checks", 200, `{"decisions":[{"status":200,"allowed":true,"reason":"ok"}]}`,
			[]want{ok, {false, reasonOther, 200, errBody}}},
		{"an entry without a status", 200, `{"decisions":[{"allowed":true,"reason":"ok"},{"status":200,"allowed":true,"reason":"ok"}]}`,
			[]want{{false, reasonOther, 200, errBody}, ok}},
		{"no list", 200, `{"decisions":{}}`, []want{{false, reasonOther, 200, errBody}}},
		{"cut short", 200, `{"decisions":[{"status":200,"allowed":true`, []want{{false, reasonOther, 200, errBody}}},
		{"the batch refused", 400, `{"error":"checks[1]: ip: not an IP address"}`,
			[]want{{false, reasonOther, 400, errStatus4xx}, {false, reasonOther, 400, errStatus4xx}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			outs := make([]outcome, len(tt.want))
			classifyBatch(outs, response{status: tt.status, body: []byte(tt.body)})
			for i, w := range tt.want {
				o := outs[i]
				if !o.answered || o.allowed != w.allowed || o.reason != w.reason || o.status != w.status || o.err != w.err {
					t.Errorf("check %d: %+v; want %+v", i, o, w)
				}
			}
		})
	}
}

func TestNextObject(t *testing.T) {
	tests := []struct{ in, obj, rest string }{
		{`{"a":1},{"b":2}]}`, `{"a":1}`, `,{"b":2}]}`},
		{` {"a":{"b":"}"}} ]`, `{"a":{"b":"}"}}`, ` ]`},
		{`{"a":"\"}{"}x`, `{"a":"\"}{"}`, `x`},
		{`]}`, ``, ``},
		{`{"a":1`, ``, ``},
		{`}`, ``, ``},
		{``, ``, ``},
	}
	for _, tt := range tests {
		obj, rest := nextObject([]byte(tt.in))
		if string(obj) != tt.obj || string(rest) != tt.rest {
			t.Errorf("nextObject(%q) = %q, %q; want %q, %q", tt.in, obj, rest, tt.obj, tt.rest)
		}
	}
}
