package main

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"
)

// sender sends one drawn request over a protocol and fills in its outcome:
// whether the limiter answered, the verdict or the error class. Each worker
// owns one.
type sender interface {
	// send returns the error of a request that failed, for the worker to
	// tell a run cut short from a failure.
	send(ctx context.Context, d *Draw, now time.Time, o *outcome) error
	// interrupt makes the request in flight, if any, fail at once, and
	// every later one fail: the run is over. Safe from any goroutine.
	interrupt()
	// close releases what the sender holds; the worker's goroutine only.
	close()
}

// httpSender sends POST /v1/check, or with -protocol json POST /json, over
// the worker's own keep-alive connection.
type httpSender struct {
	builder    requestBuilder
	client     *client
	appendBody func(d *Draw, dst []byte) []byte
	classify   func(o *outcome, res response)
	body       []byte // scratch for the request body
	req        []byte // scratch for the whole request
}

// newHTTPSender returns a sender of POST /v1/check.
func newHTTPSender(builder requestBuilder, cl *client) *httpSender {
	return &httpSender{builder: builder, client: cl, appendBody: (*Draw).AppendJSON, classify: classify,
		body: make([]byte, 0, 512), req: make([]byte, 0, 1024)}
}

// newJSONSender returns a sender of envoyproxy/ratelimit's POST /json.
func newJSONSender(builder requestBuilder, cl *client, r rlsJSON) *httpSender {
	h := newHTTPSender(builder, cl)
	h.appendBody = r.appendBody
	h.classify = classifyRLSJSON
	return h
}

func (h *httpSender) send(ctx context.Context, d *Draw, now time.Time, o *outcome) error {
	h.body = h.appendBody(d, h.body[:0])
	h.req = h.builder.append(h.req[:0], h.body)
	res, class, err := h.client.roundTrip(ctx, h.req, now)
	if class == errNone {
		h.classify(o, res)
	} else {
		o.err = class
	}
	return err
}

func (h *httpSender) interrupt() { h.client.interrupt() }
func (h *httpSender) close()     { h.client.drop() }

// worker sends requests through its own sender, closed or open loop as
// its schedule says, and counts their outcomes.
type worker struct {
	sched   *schedule
	traffic *Traffic
	sender  sender
	rng     *rand.Rand
	draw    Draw // the request being sent, its buffers reused
	timer   *time.Timer

	// mu guards the counts against the collector, which drains them once
	// per progress interval: uncontended the rest of the time, so it costs
	// a few nanoseconds per request.
	mu    sync.Mutex
	tally tally
	warm  warmCounts
}

func newWorker(id int, seed uint64, sched *schedule, traffic *Traffic, s sender) *worker {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &worker{
		sched:   sched,
		traffic: traffic,
		sender:  s,
		rng:     rand.New(rand.NewPCG(seed, uint64(id))),
		draw:    Draw{IP: make([]byte, 0, 16), UserID: make([]byte, 0, 32), endpointBuf: make([]byte, 0, 64)},
		timer:   t,
	}
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
		o := outcome{late: late}
		w.traffic.Next(w.rng, &w.draw)
		o.profile = w.draw.Profile
		if err := w.sender.send(ctx, &w.draw, now, &o); err != nil && ctx.Err() != nil {
			return
		}
		if o.answered {
			o.latency = time.Since(start)
		}
		w.record(&o, measured)
		if o.err != errConnect && o.err != errUnavail {
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

func (w *worker) record(o *outcome, measured bool) {
	w.mu.Lock()
	if measured {
		w.tally.add(o)
	} else {
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
