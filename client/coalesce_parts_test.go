package client

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// concurrentLimiter answers every call once want calls are on their way
// at once (or after 3 seconds, for a client that sends them one after
// the other), and records how many at most were.
type concurrentLimiter struct {
	*batchLimiter
	want    int
	mu      sync.Mutex
	in, max int
	all     chan struct{}
}

// arrive counts a call on its way until want are, or 3 seconds have
// passed (a client sending them one after the other never gets there).
func (l *concurrentLimiter) arrive() {
	l.mu.Lock()
	l.in++
	l.max = max(l.max, l.in)
	if l.in == l.want {
		close(l.all)
	}
	l.mu.Unlock()
	select {
	case <-l.all:
	case <-time.After(3 * time.Second):
	}
	l.mu.Lock()
	l.in--
	l.mu.Unlock()
}

// peak is the most calls that were on their way at once.
func (l *concurrentLimiter) peak() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.max
}

// gatherBehindHeld holds one call of op (check or report) at l, then has
// one caller per endpoint gather behind it; it returns the held call's
// result and theirs, which come once l opens.
func gatherBehindHeld(t *testing.T, l *concurrentLimiter, c *Client, op string, endpoints []string) (chan result, []chan result) {
	t.Helper()
	if op == "check" {
		return holdOne(t, l.batchLimiter, c), gather(t, c, context.Background(), endpoints)
	}
	report := func(ip, ep string, out chan result) {
		_, err := c.Report(context.Background(), &Outcome{IP: ip, Endpoint: ep, Status: 200})
		out <- result{err: err}
	}
	heldOut := make(chan result, 1)
	go report("203.0.113.1", "/held", heldOut)
	for len(l.sent("/v1/report")) == 0 {
		time.Sleep(time.Millisecond)
	}
	var outs []chan result
	for _, ep := range endpoints {
		out := make(chan result, 1)
		outs = append(outs, out)
		go report("203.0.113.2", ep, out)
	}
	for gatheringReports(c) < len(endpoints) {
		time.Sleep(time.Millisecond)
	}
	return heldOut, outs
}

// A group of checks too large for one body of the API (an attacker's
// requests with long paths among them: 8000 '<', each 48 KB of JSON) goes
// in several calls, each on a connection of its own, at once: a check
// gathered behind the long ones waits one round trip, as its own call
// would have. Before, the calls went one after the other on one
// connection, so that each check waited for every call before its own:
// with a slow limiter, many times Timeout.
func TestGroupPartsGoAtOnce(t *testing.T) {
	long := "/" + strings.Repeat("<", 8000)
	endpoints := []string{"/n/1", long, "/n/2", long, long, "/n/3"}
	const parts = 3 // each long one in a call of its own, with some short ones
	for _, op := range []string{"check", "report"} {
		l := &concurrentLimiter{want: parts, all: make(chan struct{})}
		l.batchLimiter = newBatchLimiter(t)
		l.onCall = func(r *http.Request, body string) {
			if strings.Contains(body, `"/held"`) {
				return // the call the group gathers behind
			}
			l.arrive()
		}
		c := newClient(t, Config{URL: l.URL, BatchWait: time.Hour, Timeout: 5 * time.Minute, MaxConns: 8})
		heldOut, outs := gatherBehindHeld(t, l, c, op, endpoints)
		l.open()
		if r := <-heldOut; r.err != nil && op == "check" {
			t.Fatalf("%s: the held call: %v", op, r.err)
		}
		for i, out := range outs {
			if r := <-out; r.err != nil && op == "check" {
				t.Errorf("%s %d: %v", op, i, r.err)
			}
		}
		got := l.peak()
		if got != parts {
			t.Fatalf("%s: the group's %d calls went %d at a time, want all at once", op, parts, got)
		}
	}
}

// A batch the limiter (or a proxy with a smaller body bound, 413) refuses
// decided none of its checks: each is sent again in a call of its own, and
// those calls go at once, each on a connection of its own, as the checks'
// own calls would have: not one after the other, each check waiting for
// those before it (up to 100 round trips, on every batch a proxy refuses).
// The same for reports.
func TestRefusedBatchResentAtOnce(t *testing.T) {
	endpoints := []string{"/n/1", "/n/2", "/n/3", "/n/4"}
	for _, op := range []string{"check", "report"} {
		l := &concurrentLimiter{want: len(endpoints), all: make(chan struct{})}
		l.batchLimiter = newBatchLimiter(t)
		l.refuse = `{"error":"request body larger than a proxy's bound"}`
		l.onCall = func(r *http.Request, body string) {
			if strings.Contains(body, `"/held"`) || strings.HasSuffix(r.URL.Path, "/batch") {
				return
			}
			l.arrive()
		}
		c := newClient(t, Config{URL: l.URL, BatchWait: time.Hour, Timeout: 5 * time.Minute, MaxConns: 8})
		heldOut, outs := gatherBehindHeld(t, l, c, op, endpoints)
		l.open()
		if r := <-heldOut; r.err != nil {
			t.Fatalf("%s: the held call: %v", op, r.err)
		}
		for i, out := range outs {
			if r := <-out; r.err != nil {
				t.Errorf("%s %d: %v", op, i, r.err)
			}
		}
		if n := len(l.sent("/v1/" + op + "/batch")); n != 1 {
			t.Fatalf("%s: %d batches sent, want 1", op, n)
		}
		got := l.peak()
		if got != len(endpoints) {
			t.Fatalf("%s: the %d calls sent again went %d at a time, want all at once", op, len(endpoints), got)
		}
	}
}
