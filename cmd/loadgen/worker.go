package main

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"
)

// sender sends one request carrying drawn checks over a protocol and fills
// in each one's outcome: whether the limiter answered, the verdict or the
// error class. Each worker owns one.
type sender interface {
	// send sends draws (one check, or with -batch that many) and sets
	// outs[i] to the outcome of draws[i]. It returns the error of a
	// request that failed, for the worker to tell a run cut short from a
	// failure.
	send(ctx context.Context, draws []Draw, now time.Time, outs []outcome) error
	// interrupt makes the request in flight, if any, fail at once, and
	// every later one fail: the run is over. Safe from any goroutine.
	interrupt()
	// close releases what the sender holds; the worker's goroutine only.
	close()
}

// httpSender sends POST /v1/check, with -batch POST /v1/check/batch, or
// with -protocol json POST /json, over the worker's own keep-alive
// connection.
type httpSender struct {
	builder    requestBuilder
	client     *client
	appendBody func(draws []Draw, dst []byte) []byte
	classify   func(outs []outcome, res response)
	body       []byte // scratch for the request body
	req        []byte // scratch for the whole request
}

// newHTTPSender returns a sender of POST /v1/check.
func newHTTPSender(builder requestBuilder, cl *client) *httpSender {
	return &httpSender{builder: builder, client: cl, appendBody: one((*Draw).AppendJSON), classify: oneOutcome(classify),
		body: make([]byte, 0, 512), req: make([]byte, 0, 1024)}
}

// newBatchSender returns a sender of POST /v1/check/batch.
func newBatchSender(builder requestBuilder, cl *client) *httpSender {
	h := newHTTPSender(builder, cl)
	h.appendBody = appendBatchBody
	h.classify = classifyBatch
	return h
}

// newJSONSender returns a sender of envoyproxy/ratelimit's POST /json.
func newJSONSender(builder requestBuilder, cl *client, r rlsJSON) *httpSender {
	h := newHTTPSender(builder, cl)
	h.appendBody = one(r.appendBody)
	h.classify = oneOutcome(classifyRLSJSON)
	return h
}

// one adapts the body writer of a single check to a sender's.
func one(appendBody func(d *Draw, dst []byte) []byte) func([]Draw, []byte) []byte {
	return func(draws []Draw, dst []byte) []byte { return appendBody(&draws[0], dst) }
}

// oneOutcome adapts the classification of a single check to a sender's.
func oneOutcome(classify func(o *outcome, res response)) func([]outcome, response) {
	return func(outs []outcome, res response) { classify(&outs[0], res) }
}

func (h *httpSender) send(ctx context.Context, draws []Draw, now time.Time, outs []outcome) error {
	h.body = h.appendBody(draws, h.body[:0])
	h.req = h.builder.append(h.req[:0], h.body)
	res, class, err := h.client.roundTrip(ctx, h.req, now)
	if class == errNone {
		h.classify(outs, res)
		return err
	}
	for i := range outs {
		outs[i].err = class
	}
	return err
}

func (h *httpSender) interrupt() { h.client.interrupt() }
func (h *httpSender) close()     { h.client.drop() }

// worker sends requests through its own sender, closed or open loop as
// its schedule says, and counts their outcomes: one per check, so a batch
// of n counts n times, each with the batch's latency.
type worker struct {
	sched    *schedule
	traffic  *Traffic
	sender   sender
	rng      *rand.Rand
	draws    []Draw    // the checks being sent, their buffers reused
	outcomes []outcome // of each of draws
	timer    *time.Timer

	// mu guards the counts against the collector, which drains them once
	// per progress interval: uncontended the rest of the time, so it costs
	// a few nanoseconds per request.
	mu    sync.Mutex
	tally tally
	warm  warmCounts
}

// newWorker returns a worker sending batch checks per request through s.
func newWorker(id int, seed uint64, sched *schedule, traffic *Traffic, s sender, batch int) *worker {
	t := time.NewTimer(time.Hour)
	t.Stop()
	w := &worker{
		sched:    sched,
		traffic:  traffic,
		sender:   s,
		rng:      rand.New(rand.NewPCG(seed, uint64(id))),
		draws:    make([]Draw, batch),
		outcomes: make([]outcome, batch),
		timer:    t,
	}
	for i := range w.draws {
		w.draws[i] = Draw{IP: make([]byte, 0, 16), UserID: make([]byte, 0, 32), endpointBuf: make([]byte, 0, 64)}
	}
	return w
}

// maxBackoff bounds the pause after a failed connection attempt, so that a
// dead limiter is not hammered and a restarted one is found again quickly.
const maxBackoff = time.Second

// run sends requests until the schedule ends or ctx is done. A request
// that ctx cuts short is not counted: it belongs to no measured interval.
func (w *worker) run(ctx context.Context) {
	stop := context.AfterFunc(ctx, w.sender.interrupt)
	defer stop()
	defer w.sender.close()
	var backoff time.Duration
	for {
		start, now, late, measured, ok := w.next(ctx)
		if !ok {
			return
		}
		for i := range w.draws {
			w.traffic.Next(w.rng, &w.draws[i])
			w.outcomes[i] = outcome{late: late, profile: w.draws[i].Profile}
		}
		if err := w.sender.send(ctx, w.draws, now, w.outcomes); err != nil && ctx.Err() != nil {
			return
		}
		latency := time.Since(start)
		for i := range w.outcomes {
			if w.outcomes[i].answered {
				w.outcomes[i].latency = latency
			}
		}
		w.record(w.outcomes, measured)
		if failed := w.outcomes[0].err; failed != errConnect && failed != errUnavail {
			backoff = 0
			continue
		}
		backoff = min(max(2*backoff, 50*time.Millisecond), maxBackoff)
		if !w.sleep(ctx, backoff) {
			return
		}
	}
}

// next waits for the turn of the next request. It returns the time its
// latency counts from, the clock now, whether it is late (open loop) and
// measured; ok is false when the run is over.
func (w *worker) next(ctx context.Context) (start, now time.Time, late, measured, ok bool) {
	if w.sched.rate == 0 {
		now = time.Now()
		measured, ok = w.sched.claimClosed(now)
		return now, now, false, measured, ok
	}
	due, measured, ok := w.sched.nextOpen()
	if !ok {
		return
	}
	if wait := time.Until(due); wait > 0 {
		// Idle until due: latency counts from the actual send, since a
		// timer may wake up to a millisecond late and that is no latency
		// of the limiter's.
		if !w.sleep(ctx, wait) {
			return start, now, false, false, false
		}
		now = time.Now()
		start = now
	} else {
		// Already due when a worker became free: the wait is the
		// limiter's doing (or the machine's), so it counts.
		now = time.Now()
		start = due
		late = now.Sub(due) > lateAfter
	}
	if !now.Before(w.sched.end) {
		return start, now, false, false, false // behind at the end: the rest is never sent
	}
	return start, now, late, measured, true
}

// sleep waits for d; false when ctx ends first.
func (w *worker) sleep(ctx context.Context, d time.Duration) bool {
	w.timer.Reset(d)
	select {
	case <-w.timer.C:
		return true
	case <-ctx.Done():
		w.timer.Stop()
		return false
	}
}

func (w *worker) record(outs []outcome, measured bool) {
	w.mu.Lock()
	for i := range outs {
		o := &outs[i]
		if measured {
			w.tally.add(o)
			continue
		}
		w.warm.requests++
		if o.err != errNone {
			w.warm.errors++
		}
	}
	w.mu.Unlock()
}

// drainInto moves the worker's counts into t and warm.
func (w *worker) drainInto(t *tally, warm *warmCounts) {
	w.mu.Lock()
	defer w.mu.Unlock()
	t.merge(&w.tally)
	w.tally.reset()
	warm.requests += w.warm.requests
	warm.errors += w.warm.errors
	w.warm = warmCounts{}
}

// collector gathers the workers' counts: the interval since its last
// collection and the running total. Only one goroutine uses it at a time.
type collector struct {
	workers  []*worker
	interval tally
	warm     warmCounts
	total    tally
	last     time.Time // of the last collection
}

// collect drains every worker into interval (and warm) and adds them to
// total; it returns the time since the previous collection.
func (c *collector) collect(now time.Time) time.Duration {
	c.interval.reset()
	c.warm = warmCounts{}
	for _, w := range c.workers {
		w.drainInto(&c.interval, &c.warm)
	}
	c.total.merge(&c.interval)
	dt := now.Sub(c.last)
	c.last = now
	return dt
}
