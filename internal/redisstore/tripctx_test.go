package redisstore

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/testkit/decidetest"
)

// A tripContext is context.WithTimeout for each round trip between start
// and end, its done channel renewed after a round trip that timed out.
func TestTripContext(t *testing.T) {
	c := newTripContext()
	before := time.Now()
	ctx := c.startLate(50*time.Millisecond, 50*time.Millisecond, nil)
	if d, ok := ctx.Deadline(); !ok || d.Before(before.Add(50*time.Millisecond)) || d.After(time.Now().Add(50*time.Millisecond)) {
		t.Fatalf("deadline %v, %v; want 50ms from start", d, ok)
	}
	if ctx.Err() != nil || ctx.Value("k") != nil {
		t.Fatalf("running: Err %v, Value %v", ctx.Err(), ctx.Value("k"))
	}
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed at the deadline")
	}
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) || time.Since(before) < 50*time.Millisecond {
		t.Fatalf("after the deadline: Err %v after %v", ctx.Err(), time.Since(before))
	}
	c.end()

	ctx = c.startLate(20*time.Millisecond, 20*time.Millisecond, nil)
	if ctx.Err() != nil {
		t.Fatalf("next round trip starts timed out: %v", ctx.Err())
	}
	done := ctx.Done()
	c.end() // before its deadline: never expires
	time.Sleep(60 * time.Millisecond)
	select {
	case <-done:
		t.Fatal("Done closed after the round trip ended in time")
	default:
	}
	if ctx.Err() != nil {
		t.Fatalf("Err %v after the round trip ended in time", ctx.Err())
	}
	late := func() {} // as a lane's worker passes its own, made once
	if n := testing.AllocsPerRun(100, func() { c.startLate(time.Second, 2*time.Second, late); c.end() }); n != 0 {
		t.Errorf("%v allocations per round trip in time, want 0", n)
	}
}

// The coalescer's Timeout bounds each round trip to a server that never
// answers, one after the other.
func TestCoalescerTimeoutOnAHungServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, conn) }() // reads, never answers
		}
	}()
	// As Connect makes clients: contexts bound the commands. RESP2 without
	// identity: no handshake, whose reads go-redis bounds by ReadTimeout.
	client := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), Protocol: 2, DisableIdentity: true,
		ContextTimeoutEnabled: true, ReadTimeout: time.Minute, WriteTimeout: time.Minute, MaxRetries: -1})
	defer client.Close()
	const timeout = 100 * time.Millisecond
	co := NewCoalescer(New(client), CoalesceConfig{Timeout: timeout, Pipelines: 1, NodeFailures: 100})
	defer co.Close()
	call := decide.Call{Keys: decidetest.Keys("rwtest:hung:", "a"), Algorithm: decide.FixedWindow, Cost: 1,
		Limits: []decide.Limit{{Requests: 10, Per: time.Second}}}
	for i := range 3 {
		start := time.Now()
		_, err := co.Decide(context.Background(), []decide.Call{call})
		if took := time.Since(start); err == nil || took < timeout || took > 10*timeout {
			t.Fatalf("round trip %d: %v after %v, want an error after about %v", i, err, took, timeout)
		}
	}
}

// A round trip with a callers' deadline calls late once it passes, and goes
// on to its own deadline; one that ends before calls nothing.
func TestTripContextLate(t *testing.T) {
	c := newTripContext()
	lateCalls := make(chan struct{}, 2)
	late := func() { lateCalls <- struct{}{} }
	ctx := c.startLate(20*time.Millisecond, 200*time.Millisecond, late)
	select {
	case <-lateCalls:
	case <-time.After(5 * time.Second):
		t.Fatal("late not called at the callers' deadline")
	}
	if ctx.Err() != nil {
		t.Fatalf("the round trip ended with its callers' deadline: %v", ctx.Err())
	}
	<-ctx.Done()
	if !c.end() {
		t.Fatal("end does not report the late call")
	}
	if len(lateCalls) != 0 {
		t.Fatal("late called twice")
	}

	c.startLate(20*time.Millisecond, 200*time.Millisecond, late)
	if c.end() {
		t.Fatal("a round trip ended in time reports a late call")
	}
	time.Sleep(60 * time.Millisecond)
	if len(lateCalls) != 0 {
		t.Fatal("late called after the round trip ended in time")
	}
}
