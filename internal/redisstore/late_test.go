package redisstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/decidetest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// lateCoalescer is a coalescer behind a proxy that holds back every reply
// by delay, with the limiter's REDIS_TIMEOUT (50ms) and lateWait.
func lateCoalescer(t *testing.T, delay, lateWait time.Duration) (*Coalescer, *redistest.SlowProxy) {
	t.Helper()
	proxy := redistest.StartSlowProxy(t, redistest.Addr(t)) // Addr: skipped when the shared Redis does not answer
	client, err := Connect(ClientConfig{URL: "redis://" + proxy.Addr() + "/0", Timeout: 50 * time.Millisecond,
		SocketTimeout: 50*time.Millisecond + lateWait, NoRetries: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	co := NewCoalescer(New(client), CoalesceConfig{Timeout: 50 * time.Millisecond, LateWait: lateWait,
		NodeFailures: 2, NodeRetry: time.Minute})
	t.Cleanup(co.Close)
	// Connections and scripts in place before replies are held back.
	if err := co.store.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	proxy.SetDelay(1, delay)
	return co, proxy
}

// decideLate decides n calls of call at once, all answered late, and
// settles each as the limiter would: admitted or refused.
func decideLate(t *testing.T, co *Coalescer, call decide.Call, n int, admitted bool) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			_, err := co.Decide(context.Background(), []decide.Call{call})
			var late *LateError
			if !errors.As(err, &late) || Unreached(err) || ClassifyError(err) != classTimeout {
				errs <- err
				return
			}
			late.Settle(0, 1, admitted)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a call whose reply is late: %v, want a *LateError, a timeout of unknown outcome", err)
	}
}

// admitted decides n calls of call in time and counts the admitted.
func admittedOf(t *testing.T, co *Coalescer, call decide.Call, n int) int {
	t.Helper()
	got := 0
	for range n {
		rs, err := co.Decide(context.Background(), []decide.Call{call})
		if err != nil {
			t.Fatal(err)
		}
		if rs[0].Allowed {
			got++
		}
	}
	return got
}

func waitSettled(t *testing.T, co *Coalescer) {
	t.Helper()
	testkit.WaitFor(t, 10*time.Second, "the late replies and their give-backs", func() bool {
		return testutil.ToFloat64(co.giveBacks.pending) == 0
	})
}

// A call answered at REDIS_TIMEOUT while Redis still runs it is refused by
// the limiter; when the reply comes, what Redis admitted is given back, so
// the key then admits its whole limit, for every algorithm. A request the
// limiter served keeps its count.
func TestLateRepliesAreGivenBack(t *testing.T) {
	co, proxy := lateCoalescer(t, 150*time.Millisecond, 2*time.Second)
	prefix := redistest.Prefix(t, newClient(t, redisAddr()))
	calls := map[string]decide.Call{
		"fixed window": {Algorithm: decide.FixedWindow,
			Limits: []decide.Limit{{Requests: 10, Per: time.Hour}, {Requests: 20, Per: 24 * time.Hour}}},
		"counted fixed window": {Algorithm: decide.FixedWindow, Limits: []decide.Limit{{Requests: 10, Per: time.Hour}}},
		"sliding window":       {Algorithm: decide.SlidingWindow, Limits: []decide.Limit{{Requests: 10, Per: time.Hour}}},
		"sliding window counter": {Algorithm: decide.SlidingWindowCounter,
			Limits: []decide.Limit{{Requests: 10, Per: time.Hour}}},
		"token bucket": {Algorithm: decide.TokenBucket, Limits: []decide.Limit{{Rate: 1, Per: time.Hour, Burst: 10}}},
		"penalty": {Algorithm: decide.FixedWindow, Penalty: time.Minute,
			Limits: []decide.Limit{{Requests: 10, Per: time.Hour}}},
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			testkit.AvoidHourEnd(t) // the admitted are counted against the hour's (and day's) limit
			call.Keys, call.Cost = decidetest.Keys(prefix, name), 1
			proxy.SetDelay(1, 150*time.Millisecond)
			n := 30 // over the limit: denials, refunds of counted ones, give-backs in between
			if call.Penalty > 0 {
				n = 10 // a denial's penalty is no count to give back: it holds the key
			}
			decideLate(t, co, call, n, false)
			waitSettled(t, co)
			proxy.SetDelay(0, 0)
			if got := admittedOf(t, co, call, 11); got != 10 {
				t.Fatalf("after %d refused calls answered late: %d of 11 admitted, want the whole limit of 10", n, got)
			}

			kept := call
			kept.Keys = decidetest.Keys(prefix, name+" served")
			proxy.SetDelay(1, 150*time.Millisecond)
			decideLate(t, co, kept, 4, true)
			waitSettled(t, co)
			proxy.SetDelay(0, 0)
			if got := admittedOf(t, co, kept, 11); got != 6 {
				t.Fatalf("after 4 served calls answered late: %d of 11 admitted, want 6", got)
			}
		})
	}
	// At least the limit of each key: a call admitted once an earlier
	// give-back landed is given back too.
	if n := testutil.ToFloat64(co.giveBacks.issued); n < 10*float64(len(calls)) {
		t.Errorf("rate_limit_redis_give_backs_total %v, want at least %d", n, 10*len(calls))
	}
}

// A reply that never comes within the late wait leaves its calls unknown:
// dropped and counted, nothing held once the wait is over.
func TestLateRepliesThatNeverComeAreDropped(t *testing.T) {
	co, _ := lateCoalescer(t, 3*time.Second, 100*time.Millisecond)
	prefix := redistest.Prefix(t, newClient(t, redisAddr()))
	call := decide.Call{Keys: decidetest.Keys(prefix, "dead"), Algorithm: decide.SlidingWindow, Cost: 1,
		Limits: []decide.Limit{{Requests: 10, Per: time.Hour}}}
	decideLate(t, co, call, 5, false)
	waitSettled(t, co)
	if n := testutil.ToFloat64(co.giveBacks.dropped.WithLabelValues(dropUnanswered)); n != 5 {
		t.Errorf("dropped{unanswered} %v, want 5", n)
	}
	if n := testutil.ToFloat64(co.giveBacks.issued); n != 0 {
		t.Errorf("%v give-backs issued for replies that never came", n)
	}
}

// Under load, every fifth reply late: 600 calls from 200 callers on a limit
// of 100, every late one refused, then a sweep in time: exactly the limit in
// all, for every algorithm.
func TestLateRepliesUnderLoadAreExact(t *testing.T) {
	co, proxy := lateCoalescer(t, 120*time.Millisecond, time.Second)
	prefix := redistest.Prefix(t, newClient(t, redisAddr()))
	for _, call := range []decide.Call{
		{Algorithm: decide.FixedWindow, Limits: []decide.Limit{{Requests: 100, Per: time.Hour}}},
		{Algorithm: decide.FixedWindow, Limits: []decide.Limit{{Requests: 100, Per: time.Hour}, {Requests: 1000, Per: 24 * time.Hour}}},
		{Algorithm: decide.SlidingWindow, Limits: []decide.Limit{{Requests: 100, Per: time.Hour}}},
		{Algorithm: decide.SlidingWindowCounter, Limits: []decide.Limit{{Requests: 100, Per: time.Hour}}},
		{Algorithm: decide.TokenBucket, Limits: []decide.Limit{{Rate: 1, Per: time.Hour, Burst: 100}}},
	} {
		name := fmt.Sprintf("%s of %d limits", call.Algorithm, len(call.Limits))
		testkit.AvoidHourEnd(t) // the admitted are counted against the hour's (and day's) limit
		call.Keys, call.Cost = decidetest.Keys(prefix, name), 1
		proxy.SetDelay(5, 120*time.Millisecond)
		var admitted, late atomic.Int64
		var wg sync.WaitGroup
		for range 200 {
			wg.Go(func() {
				for range 3 {
					rs, err := co.Decide(context.Background(), []decide.Call{call})
					var le *LateError
					switch {
					case errors.As(err, &le):
						late.Add(1)
						le.Settle(0, 1, false)
					case err != nil:
						t.Error(err)
					case rs[0].Allowed:
						admitted.Add(1)
					}
				}
			})
		}
		wg.Wait()
		proxy.SetDelay(0, 0)
		waitSettled(t, co)
		rest := int64(admittedOf(t, co, call, 150))
		t.Logf("%s: %d admitted in time, %d answered late, %d by the sweep", name, admitted.Load(), late.Load(), rest)
		if late.Load() == 0 {
			t.Errorf("%s: no reply came late", name)
		}
		if admitted.Load()+rest != 100 {
			t.Errorf("%s: %d + %d admitted, want the limit of 100 exactly", name, admitted.Load(), rest)
		}
	}
}

// A late reply may come before its caller wakes up to the LateError: it is
// the call's answer all the same, and the give-back follows the caller's
// refusal. (The answers of the calls answered in time, which the caller
// then records, must not overwrite it.)
func TestLateReplyBeforeTheCallerWakes(t *testing.T) {
	gb := &giveBacks{ch: make(chan decide.GiveBack, 4), pending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "p"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "d"}, []string{"reason"})}
	call := decide.Call{Algorithm: decide.TokenBucket, Cost: 1, Limits: []decide.Limit{{Rate: 1, Per: time.Hour, Burst: 10}}}
	late := newLateCalls(gb, []decide.Call{call})
	late.await(nil)
	late.deliver(nil, []decide.Result{{Allowed: true, At: 1}}, nil)
	late.answered([]decide.Result{{}}) // the caller wakes: nothing was answered in time
	late.settle(0, 1, refusedByCaller)
	select {
	case g := <-gb.ch:
		if g.Units() != 1 || g.Result.At != 1 {
			t.Fatalf("give-back %+v, want the late answer's", g)
		}
	default:
		t.Fatal("no give-back for a call Redis admitted and the caller refused")
	}
	if n := testutil.ToFloat64(gb.pending); n != 1 {
		t.Errorf("pending %v, want 1 (the give-back queued)", n)
	}

	// A rule that counts denied calls too (debit: always, as an Envoy
	// stream-done debit) keeps the count of a refused call.
	call.DebitDenied = true
	late = newLateCalls(gb, []decide.Call{call})
	late.await(nil)
	late.settle(0, 1, refusedByCaller)
	late.deliver(nil, []decide.Result{{Allowed: true, At: 1}}, nil)
	select {
	case g := <-gb.ch:
		t.Fatalf("give-back %+v of a call whose rule counts every call", g)
	default:
	}
}

// silentServer accepts connections and reads what they send, answering
// nothing: a Redis that stopped (SIGSTOP, a black-holed route). Its
// connections are cut by cut (at the latest when the test ends), which ends
// the round trips reading them.
func silentServer(t *testing.T) (addr string, cut func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
			go func() { _, _ = io.Copy(io.Discard, conn) }()
		}
	}()
	cut = func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	}
	t.Cleanup(cut)
	return ln.Addr().String(), cut
}

// A caller waits for its answer at most its deadline (REDIS_TIMEOUT) in a
// lane's queue, even when every worker of the lane is reading a late reply
// and no more may take their places: with a Redis that answers nothing
// within the late wait (here an hour), callers after the first 1+LateWorkers
// round trips (one pipeline) must still be answered, refused with a timeout
// of an unknown outcome, not held behind the late readers.
func TestCallersDoNotQueueBehindLateWorkers(t *testing.T) {
	addr, cut := silentServer(t)
	const lateWait = time.Hour
	client, err := Connect(ClientConfig{URL: "redis://" + addr + "/0", Timeout: 50 * time.Millisecond,
		SocketTimeout: 50*time.Millisecond + lateWait, NoRetries: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	co := NewCoalescer(New(client), CoalesceConfig{Pipelines: 1, Timeout: 50 * time.Millisecond, LateWait: lateWait})
	t.Cleanup(co.Close)
	t.Cleanup(cut) // before Close: its late workers are reading
	const callers = 3 * (1 + LateWorkers)
	answered := make(chan error, callers)
	for i := range callers {
		// One after another: each round trip goes late before the next call.
		call := decide.Call{Keys: decidetest.Keys("silent", fmt.Sprint(i)), Algorithm: decide.FixedWindow, Cost: 1,
			Limits: []decide.Limit{{Requests: 10, Per: time.Hour}}}
		go func() {
			_, err := co.Decide(context.Background(), []decide.Call{call})
			answered <- err
		}()
		select {
		case err := <-answered:
			if ClassifyError(err) != classTimeout || Unreached(err) {
				t.Fatalf("caller %d: %v, want a timeout of unknown outcome", i, err)
			}
		case <-time.After(30 * time.Second): // the late wait is an hour: not a question of speed
			t.Fatalf("caller %d of %d not answered: held in the queue behind %d workers reading late replies",
				i+1, callers, 1+LateWorkers)
		}
	}
}

// A late call of a rule that debits denied calls keeps its count when the
// caller refused its request (an answer in time would have counted it
// too), and gives it back when a lease paid for the request instead (the
// request would count twice).
func TestLateDebitGoesBackOnlyWhenALeasePaid(t *testing.T) {
	for _, tc := range []struct {
		name  string
		how   uint8
		units int64 // given back; 0: none
	}{
		{"refused", refusedByCaller, 0},
		{"served", kept, 0},
		{"paid by a lease", paidElsewhere, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gb := &giveBacks{ch: make(chan decide.GiveBack, 4), pending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "p"}),
				dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "d"}, []string{"reason"})}
			call := decide.Call{Algorithm: decide.FixedWindow, Cost: 3, DebitDenied: true, Leased: true,
				Limits: []decide.Limit{{Requests: 10, Per: time.Hour}}}
			late := newLateCalls(gb, []decide.Call{call})
			late.await(nil)
			late.deliver(nil, []decide.Result{{Allowed: true, At: 1}}, nil)
			late.settle(0, 1, tc.how)
			var got int64
			select {
			case g := <-gb.ch:
				got = g.Units()
			default:
			}
			if got != tc.units {
				t.Fatalf("gave back %d units, want %d", got, tc.units)
			}
		})
	}
}
