package redisstore

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/ratewarden/ratewarden/internal/decide"
)

// A round trip whose reply has not come by the callers' deadline (the
// coalescer's Timeout, REDIS_TIMEOUT) answers them with a *LateError, while
// its connection keeps reading the reply for LateWait more. Redis may have
// run the calls: the limiter refuses what it cannot decide, and when the
// reply comes, whatever Redis admitted for a refused request is given back
// (decide.GiveBack), so a slow Redis neither admits more than the limit nor
// spends units on requests nobody served. The limiter tells which requests
// it refused with LateError.Settle.

// errLate is the error of calls answered at their callers' deadline while
// their round trip was still out: their outcome is unknown (a timeout).
var errLate = errors.New("redis reply late: the round trip outlived REDIS_TIMEOUT; what Redis counted for a refused request is given back when the reply comes")

// LateError is the error of a submission some of whose calls were answered
// at their callers' deadline with their round trip still out. It is a
// timeout (ClassifyError), never Unreached.
type LateError struct{ late *lateCalls }

func (e *LateError) Error() string { return errLate.Error() }

func (e *LateError) Unwrap() error { return context.DeadlineExceeded }

// Settle says what the caller did with the calls from..to-1 of its
// submission (every call, late or answered in time, since the submission
// failed as a whole): admitted, it served their request, so Redis's count
// stands (only units lent to a leased call go back: the caller never got
// the lease); else it refused it, and what Redis admitted goes back,
// unless the call's rule counts denied calls too (decide.Call.DebitDenied:
// its count is the call's whatever the answer). Calls never settled keep
// what Redis counted (a debit, whose count is its purpose). Settle may be
// called once per call, before or after the reply.
func (e *LateError) Settle(from, to int, admitted bool) {
	s := refusedByCaller
	if admitted {
		s = kept
	}
	e.late.settle(from, to, s)
}

// SettlePaid says that the caller served the requests of the calls
// from..to-1 but paid for them otherwise (units of a lease): everything
// Redis admitted for them goes back, whatever their rule, or the request
// is paid for twice.
func (e *LateError) SettlePaid(from, to int) { e.late.settle(from, to, paidElsewhere) }

// Calls' states in lateCalls.
const (
	awaiting        uint8 = 1 << iota // the reply has not come
	replied                           // results[i] is Redis's answer
	kept                              // the caller served the request
	refusedByCaller                   // the caller refused the request
	paidElsewhere                     // the caller served the request from a lease
	settledBack                       // the give-back (if any) was queued
)

// lateCalls holds a submission that was answered late: its calls (copies:
// the caller reuses its own), the answers in as they come, and what the
// caller did with each.
type lateCalls struct {
	gb      *giveBacks
	mu      sync.Mutex
	calls   []decide.Call
	results []decide.Result
	state   []uint8
}

func newLateCalls(gb *giveBacks, calls []decide.Call) *lateCalls {
	return &lateCalls{gb: gb, calls: append([]decide.Call(nil), calls...),
		results: make([]decide.Result, len(calls)), state: make([]uint8, len(calls))}
}

// await marks the calls at idx (nil: all) as waiting for their reply.
func (l *lateCalls) await(idx []int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.each(idx, func(i int) { l.state[i] |= awaiting })
	l.gb.pending.Add(float64(n))
}

// answered records the answers of the calls answered in time: neither
// awaiting their late reply nor holding it already (it may come before the
// caller wakes).
func (l *lateCalls) answered(results []decide.Result) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range l.state {
		if l.state[i]&(awaiting|replied) == 0 {
			l.results[i] = results[i]
			l.state[i] |= replied
		}
	}
}

// deliver records the late answers of the calls at idx (nil: all), from
// results and errs (nil: none failed) by their position in the round trip,
// and queues the give-backs of those already settled.
func (l *lateCalls) deliver(idx []int, results []decide.Result, errs []error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	j := 0
	n := l.each(idx, func(i int) {
		l.state[i] &^= awaiting
		switch {
		case errs != nil && errs[j] != nil && namedTake(l.calls[i]):
			// No answer, but a take's give-back is the release of its id,
			// which needs none: taken, it ends the hold; not taken, it
			// changes nothing. Without it a refused request would keep its
			// slot for the hold's whole lifetime.
			l.results[i] = decide.Result{Allowed: true}
			l.state[i] |= replied
			l.giveBack(i)
		case errs != nil && errs[j] != nil:
			l.state[i] |= settledBack // no answer: nothing will be known of it
			l.gb.dropped.WithLabelValues(dropUnanswered).Inc()
		default:
			l.results[i] = results[j]
			l.state[i] |= replied
			l.giveBack(i)
		}
		j++
	})
	l.gb.pending.Sub(float64(n))
}

// namedTake reports whether c takes a concurrency hold under an id of
// its own, which a release can name whatever Redis answered.
func namedTake(c decide.Call) bool {
	return c.Algorithm == decide.Concurrency && !c.Release && c.Cost > 0 && c.HoldID != ""
}

func (l *lateCalls) settle(from, to int, how uint8) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := from; i < to && i < len(l.state); i++ {
		l.state[i] |= how
		l.giveBack(i)
	}
}

// giveBack queues the give-back of call i once both its answer and what
// the caller did with it are known.
func (l *lateCalls) giveBack(i int) {
	s := l.state[i]
	if s&replied == 0 || s&(kept|refusedByCaller|paidElsewhere) == 0 || s&settledBack != 0 {
		return
	}
	l.state[i] |= settledBack
	c := l.calls[i]
	if s&kept != 0 || (c.DebitDenied && s&paidElsewhere == 0) {
		// The request was served, or its rule counts every call whatever
		// the answer (debit: always; an Envoy stream-done debit must
		// stand): only the lease goes back. A request a lease paid for
		// gives its call's count back in any case.
		c.Cost = 0
	}
	if g, ok := decide.GiveBackOf(c, l.results[i]); ok {
		l.gb.queue(g)
	}
}

// each calls f for the positions idx (nil: every call) and returns how many.
func (l *lateCalls) each(idx []int, f func(i int)) int {
	if idx == nil {
		for i := range l.calls {
			f(i)
		}
		return len(l.calls)
	}
	for _, i := range idx {
		f(i)
	}
	return len(idx)
}

// Why a give-back was dropped: the labels of
// rate_limit_redis_give_backs_dropped_total.
const (
	dropUnanswered = "unanswered" // the late reply never came: what Redis did is unknown
	dropQueueFull  = "queue_full" // more give-backs waiting than maxGiveBacks
	dropFailed     = "failed"     // the give-back's round trip failed
)

// maxGiveBacks bounds the give-backs waiting to be sent, and giveBackBatch
// the give-backs of one round trip.
const (
	maxGiveBacks  = 4096
	giveBackBatch = 64
)

// giveBacks sends the give-backs of late answers, in round trips of their
// own, from one goroutine: bounded in memory (maxGiveBacks) and in time
// (each round trip gets the coalescer's Timeout + LateWait, then what it
// carried is dropped and counted).
type giveBacks struct {
	store   *Store
	timeout time.Duration
	ch      chan decide.GiveBack
	quit    chan struct{}
	done    chan struct{}

	issued  prometheus.Counter
	pending prometheus.Gauge
	dropped *prometheus.CounterVec
	resent  prometheus.Counter

	retries []resend // owned by run
}

// resend is a hold's give-back whose round trip failed, to send again:
// the release of a hold id, which changes nothing the second time, and
// which the Redis too slow to answer the take likely failed too. left is
// how many more times it may be sent.
type resend struct {
	gb   decide.GiveBack
	left int
}

// holdResends bounds the times a hold's give-back is sent again, one round
// trip timeout (Timeout + LateWait) apart; past them the hold lapses after
// its lifetime.
const holdResends = 5

func newGiveBacks(store *Store, timeout time.Duration, reg prometheus.Registerer) *giveBacks {
	f := promauto.With(reg) // a nil Registerer registers nothing
	g := &giveBacks{store: store, timeout: timeout, ch: make(chan decide.GiveBack, maxGiveBacks),
		quit: make(chan struct{}), done: make(chan struct{}),
		issued: f.NewCounter(prometheus.CounterOpts{
			Name: "rate_limit_redis_give_backs_total",
			Help: "Give-backs applied: what Redis admitted for requests the limiter refused because the reply came after REDIS_TIMEOUT, given back when it came.",
		}),
		pending: f.NewGauge(prometheus.GaugeOpts{
			Name: "rate_limit_redis_give_backs_pending",
			Help: "Calls answered at REDIS_TIMEOUT whose late reply is still awaited, plus give-backs queued or in flight.",
		}),
		dropped: f.NewCounterVec(prometheus.CounterOpts{
			Name: "rate_limit_redis_give_backs_dropped_total",
			Help: "Calls whose give-back could not be made, by reason: unanswered (the late reply never came within REDIS_LATE_REPLY_WAIT), queue_full, failed (the give-back's round trip failed). Their units stay counted until their window ends.",
		}, []string{"reason"}),
		resent: f.NewCounter(prometheus.CounterOpts{
			Name: "rate_limit_redis_give_backs_resent_total",
			Help: "Give-backs of concurrency holds sent again after their round trip failed (a release by id, harmless twice), up to 5 times each.",
		}),
	}
	for _, r := range []string{dropUnanswered, dropQueueFull, dropFailed} {
		g.dropped.WithLabelValues(r)
	}
	go g.run()
	return g
}

// queue queues g, or drops it when the queue is full.
func (g *giveBacks) queue(gb decide.GiveBack) {
	select {
	case g.ch <- gb:
		g.pending.Inc()
	default:
		g.dropped.WithLabelValues(dropQueueFull).Inc()
	}
}

func (g *giveBacks) run() {
	defer close(g.done)
	batch := make([]decide.GiveBack, 0, giveBackBatch)
	var again <-chan time.Time // a round trip timeout after a failure, while holds wait to be sent again
	for {
		if len(g.retries) > 0 && again == nil {
			again = time.After(g.timeout)
		}
		select {
		case gb := <-g.ch:
			g.send(g.fill(append(batch[:0], gb)), nil)
		case <-again:
			again = nil
			g.sendAgain(batch[:0])
		case <-g.quit:
			// Stopping: what is queued gets one round trip, and so do the
			// holds waiting to be sent again.
			for b := g.fill(batch[:0]); len(b) > 0; b = g.fill(batch[:0]) {
				g.send(b, nil)
			}
			for i := range g.retries {
				g.retries[i].left = 0
			}
			for len(g.retries) > 0 {
				g.sendAgain(batch[:0])
			}
			return
		}
	}
}

// sendAgain sends up to giveBackBatch of the holds' give-backs waiting to
// be sent again, in batch.
func (g *giveBacks) sendAgain(batch []decide.GiveBack) {
	n := min(len(g.retries), giveBackBatch)
	left := make([]int, n)
	for i, r := range g.retries[:n] {
		batch, left[i] = append(batch, r.gb), r.left
	}
	g.retries = append(g.retries[:0], g.retries[n:]...)
	g.resent.Add(float64(n))
	g.send(batch, left)
}

// fill adds to batch the give-backs waiting, up to giveBackBatch.
func (g *giveBacks) fill(batch []decide.GiveBack) []decide.GiveBack {
	for len(batch) < giveBackBatch {
		select {
		case gb := <-g.ch:
			batch = append(batch, gb)
		default:
			return batch
		}
	}
	return batch
}

// send sends batch in one round trip. A hold's give-back that fails is
// kept to be sent again while it may (left[i]; nil: holdResends each);
// any other is dropped and counted.
func (g *giveBacks) send(batch []decide.GiveBack, left []int) {
	ctx, cancel := context.WithTimeout(context.Background(), g.timeout)
	_, errs := g.store.GiveBack(ctx, batch)
	cancel()
	for i := range batch {
		tries := holdResends
		if left != nil {
			tries = left[i]
		}
		switch {
		case errs == nil || errs[i] == nil:
			g.issued.Inc()
		case batch[i].Call.Algorithm == decide.Concurrency && tries > 0 && len(g.retries) < maxGiveBacks:
			g.retries = append(g.retries, resend{gb: batch[i], left: tries - 1})
			continue // still pending
		default:
			g.dropped.WithLabelValues(dropFailed).Inc()
		}
		g.pending.Dec()
	}
	clear(batch)
}

// stop sends what is queued once more and stops.
func (g *giveBacks) stop() {
	close(g.quit)
	<-g.done
}
