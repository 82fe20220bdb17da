package client

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// panicOnce panics on its first call, and sends the others.
type panicOnce struct{ calls atomic.Int64 }

func (p *panicOnce) RoundTrip(r *http.Request) (*http.Response, error) {
	if p.calls.Add(1) == 1 {
		panic("a transport's bug")
	}
	return http.DefaultTransport.RoundTrip(r)
}

// A check that goes alone and whose Transport panics (the panic goes on in
// the caller's goroutine, as before batching) is no call left on its way:
// before, the queue counted it in flight for good, and every later check,
// even a lone one, waited BatchWait to gather with others that never came
// (here an hour: the lone check was refused, ReasonCallerGone, when its
// context ended). The same for a report.
func TestPanickedLoneCallLeavesNothingInFlight(t *testing.T) {
	l := newBatchLimiter(t)
	l.open()
	for _, op := range []string{"check", "report"} {
		c := newClient(t, Config{URL: l.URL, BatchWait: time.Hour, Timeout: time.Minute, Transport: &panicOnce{}})
		func() {
			defer func() {
				if recover() == nil {
					t.Fatalf("%s: the Transport's panic did not reach the caller", op)
				}
			}()
			if op == "check" {
				_, _ = c.Check(context.Background(), &Request{IP: "203.0.113.1", Endpoint: "/n/1"})
			} else {
				_, _ = c.Report(context.Background(), &Outcome{IP: "203.0.113.1", Endpoint: "/n/1", Status: 200})
			}
		}()
		for _, q := range []*checkQueue{c.checks, c.reportQ} {
			q.mu.Lock()
			n := q.inflight
			q.mu.Unlock()
			if n != 0 {
				t.Fatalf("%s: %d calls in flight after the panic, want 0", op, n)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		d, err := c.Check(ctx, &Request{IP: "203.0.113.1", Endpoint: "/n/2"})
		cancel()
		if err != nil || d.Remaining != 2 {
			t.Fatalf("%s: the next lone check: %+v, %v", op, d, err)
		}
	}
}

// A check that gathered with others while a call was on its way, and goes
// after Close, is not sent: calls after Close fail with ErrClosed, as a
// check of its own does (Config, Close). Before, the gathered check was
// sent all the same, on a transport Close had closed.
func TestGatheredCheckAfterCloseNotSent(t *testing.T) {
	l := newBatchLimiter(t)
	c := newClient(t, Config{URL: l.URL, BatchWait: time.Hour, Timeout: time.Minute})
	held := holdOne(t, l, c)
	outs := gather(t, c, context.Background(), []string{"/n/1", "/n/2"})
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	l.open()
	if r := <-held; r.err != nil {
		t.Fatalf("the held check: %v", r.err)
	}
	for i, out := range outs {
		if r := <-out; !errors.Is(r.err, ErrClosed) || !r.d.Fallback {
			t.Errorf("check %d after Close: %+v, %v; want ErrClosed, the failure policy's", i, r.d, r.err)
		}
	}
	if n := len(l.sent("/v1/check/batch")); n != 0 {
		t.Fatalf("%d batches sent after Close", n)
	}
}
