package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// Concurrent checks share calls, as the limiter's own Redis round trips
// do (its redisstore.Coalescer): a check with no other call of the client
// on its way goes at once, alone, as POST /v1/check; a check that arrives
// while one is gathers with the others that arrive meanwhile, and they go
// together, as one POST /v1/check/batch, when a call in flight returns or
// when the first of them has waited Config.BatchWait, whichever comes
// first (or at once when they are maxBatch). One call carries many checks:
// the limiter and the client each read, write and wake up once for all of
// them, which is most of a check's cost on both sides.
//
// Each check still gets what Check alone would have given it: its own
// decision with the rate-limit headers /v1/check sets (the batch asks for
// them: "headers": true), its own error, its own failure policy; the
// breaker hears of each check of a batch as of a call of its own (a batch
// of 30 that fails counts 30 failures, as 30 single calls would); and a
// caller whose context ends before its check is sent leaves, refused
// (ReasonCallerGone), as it leaves the wait for a connection.

// defaultBatchWait is Config.BatchWait's default: the longest a check
// waits for others beyond a call in flight. The round trip of a check on
// loopback is about 100 µs; a call in flight usually returns first, so most
// checks wait less (docs/performance.md).
const defaultBatchWait = 100 * time.Microsecond

// checkQueue gathers the checks that arrive while a call is on its way.
type checkQueue struct {
	c    *Client
	wait time.Duration

	mu       sync.Mutex
	inflight int         // check calls on their way, single or batch
	group    *checkGroup // the checks gathering for the next call; nil: none
	off      bool        // the limiter refused batches with headers: one check per call
}

// checkGroup is the checks that go in one call.
type checkGroup struct {
	entries []*checkEntry
	timer   *time.Timer
}

// checkEntry is one caller's check in a group.
type checkEntry struct {
	ctx context.Context
	req *Request
	d   Decision
	err error
	// out and r are a report's (a queue of reports), in place of req and d.
	out  *Outcome
	r    ReportResult
	done chan struct{}
	// Guarded by checkQueue.mu: sent once its call has taken it (a caller
	// then waits for the answer), gone once its caller has left before.
	sent, gone bool
	// done of its breaker's Allow, once it has one.
	breakerDone func(error)
	// answered is set by finish: read by the sender only.
	answered bool
}

// op is the Op of e's errors: check or report.
func (e *checkEntry) op() string {
	if e.out != nil {
		return "report"
	}
	return "check"
}

// tell tells the breaker the outcome of e's call, once.
func (e *checkEntry) tell(err error) {
	if done := e.breakerDone; done != nil {
		e.breakerDone = nil
		done(err)
	}
}

// finish ends the caller's wait: d and err are its answer.
func (e *checkEntry) finish() {
	e.answered = true
	e.done <- struct{}{}
}

func newCheckQueue(c *Client, wait time.Duration) *checkQueue {
	return &checkQueue{c: c, wait: wait}
}

// errGathering is the cause of a check whose caller left while it waited
// to go with other checks: it was not sent.
var errGathering = errors.New("waiting to go with other checks")

// check decides req as Check does: alone when nothing else is on its way,
// else gathered with the checks that arrive meanwhile.
func (q *checkQueue) check(ctx context.Context, req *Request) (Decision, error) {
	q.mu.Lock()
	if q.off || (q.inflight == 0 && q.group == nil) || !batchable(req) {
		q.inflight++
		q.mu.Unlock()
		// Deferred: a Transport's panic goes on in the caller's goroutine,
		// and the call must not stay counted on its way, or every later
		// check would wait BatchWait for a call that never returns.
		defer q.returned()
		return q.c.checkOne(ctx, req)
	}
	// Not pooled: the sender of its group may still read it once its caller
	// has its answer (a panic's recovery), or has left.
	e := &checkEntry{ctx: ctx, req: req, done: make(chan struct{}, 1)}
	q.join(e)
	select {
	case <-e.done:
	case <-ctx.Done():
		q.mu.Lock()
		sent := e.sent
		if !sent {
			e.gone = true
			q.remove(e)
		}
		q.mu.Unlock()
		if sent {
			<-e.done // its call is on its way: its answer is the caller's
			break
		}
		// Not sent: the caller leaves, as from the wait for a connection.
		err := &Error{Op: "check", Err: errGathering}
		d := q.c.undecided(ctx, req, err)
		q.c.failed("check", err)
		return d, err
	}
	return e.d, e.err
}

// join adds e to the group gathering, which it starts when there is none,
// and sends the group when e fills it. q.mu held; join unlocks it.
func (q *checkQueue) join(e *checkEntry) {
	g := q.group
	if g == nil {
		g = &checkGroup{entries: make([]*checkEntry, 0, 16)}
		q.group = g
		g.timer = time.AfterFunc(q.wait, func() { q.due(g) })
	}
	g.entries = append(g.entries, e)
	var full *checkGroup
	if len(g.entries) == maxBatch {
		full = q.flush()
	}
	q.mu.Unlock()
	if full != nil {
		go q.send(full)
	}
}

// report reports o as Report does: alone when nothing else is on its way,
// else with the reports that arrive meanwhile (POST /v1/report/batch). A
// report is bounded by Timeout, not by a caller's context: it never
// leaves its group.
func (q *checkQueue) report(o *Outcome) (ReportResult, error) {
	q.mu.Lock()
	if q.off || (q.inflight == 0 && q.group == nil) || validOutcome(o) != nil || long(o.Attributes) {
		q.inflight++
		q.mu.Unlock()
		defer q.returned() // as check's
		return q.c.reportOne(o)
	}
	e := &checkEntry{ctx: context.Background(), out: o, done: make(chan struct{}, 1)}
	q.join(e)
	<-e.done
	return e.r, e.err
}

// long reports whether attrs are long enough that the request or
// outcome holding them goes alone rather than take a batch's room.
func long(attrs map[string]string) bool {
	n := 0
	for k, v := range attrs {
		n += len(k) + len(v)
	}
	return n > maxBody/8
}

// remove takes e out of the group gathering, if it is in it (else the
// group on its way skips it, gone). q.mu held.
func (q *checkQueue) remove(e *checkEntry) {
	g := q.group
	if g == nil {
		return
	}
	for i, x := range g.entries {
		if x == e {
			g.entries = append(g.entries[:i], g.entries[i+1:]...)
			return
		}
	}
}

// flush takes the group gathering to be sent, as a call on its way. q.mu
// held.
func (q *checkQueue) flush() *checkGroup {
	g := q.group
	q.group = nil
	q.inflight++
	g.timer.Stop()
	return g
}

// due sends g when its wait has passed and it is still gathering.
func (q *checkQueue) due(g *checkGroup) {
	q.mu.Lock()
	if q.group != g {
		q.mu.Unlock()
		return
	}
	q.flush()
	q.mu.Unlock()
	q.send(g)
}

// returned marks a call back, and sends the group gathering, if any.
func (q *checkQueue) returned() {
	q.mu.Lock()
	q.inflight--
	var g *checkGroup
	if q.group != nil {
		g = q.flush()
	}
	q.mu.Unlock()
	if g != nil {
		go q.send(g)
	}
}

// send makes the call of the group g and answers its checks.
func (q *checkQueue) send(g *checkGroup) {
	defer q.returned()
	var es []*checkEntry // the entries this goroutine answers
	defer func() { q.recovered(es, recover()) }()
	c := q.c
	// The wait for a connection, as a single check's: bounded by Timeout,
	// and the checks whose callers leave meanwhile are not sent.
	busy := c.acquire(context.Background())
	if busy == nil {
		defer c.release()
	}
	q.mu.Lock()
	es = g.entries[:0]
	for _, e := range g.entries {
		if !e.gone {
			e.sent = true
			es = append(es, e)
		}
	}
	q.mu.Unlock()
	if busy == nil && c.closed.Load() {
		busy = ErrClosed // as call says of a check of its own
	}
	if busy != nil {
		for _, e := range es {
			q.answer(e, &Error{Op: e.op(), Err: busy})
		}
		return
	}
	// Each check asks the breaker, as its own call would: in the open
	// state none goes, half open only the first, a probe.
	sent := es[:0]
	for _, e := range es {
		done, err := c.breaker.Allow()
		if err != nil {
			c.stats.breakerOpen.Add(1)
			q.answer(e, &Error{Op: e.op(), Err: ErrBreakerOpen})
			continue
		}
		e.breakerDone = done
		sent = append(sent, e)
	}
	es = sent
	if len(sent) != 0 {
		q.sendAllowed(sent, &es)
	}
}

// recovered fails the entries of es that a panic (r, when not nil) of
// their call (Config.Transport's) left unanswered: it has no caller's
// goroutine to go on in, and the process goes on.
func (q *checkQueue) recovered(es []*checkEntry, r any) {
	if r == nil {
		return
	}
	for _, e := range es {
		err := &Error{Op: e.op(), Err: fmt.Errorf("%w: %v", errPanicked, r)}
		e.tell(err)
		if !e.answered {
			q.answer(e, err)
		}
	}
}

// sendAllowed sends es, each allowed by the breaker, on the connection
// its goroutine holds, and answers each: as many as one call of the API's
// bounds carries (100, 64 KiB), and the others at once beside it, on
// connections of their own (sendRest), not after it: a check gathered
// behind long ones (an attacker's paths of 8 KiB) waits one round trip, as
// its own call would have, not one per call its group needs. *own is set
// to the entries this goroutine answers.
func (q *checkQueue) sendAllowed(es []*checkEntry, own *[]*checkEntry) {
	c := q.c
	if len(es) == 1 { // the others left: a call of its own
		*own = es
		q.sendAlone(es[0])
		return
	}
	b := c.bufs.Get().(*callBuf)
	defer c.bufs.Put(b)
	var end int
	if es[0].out != nil {
		b.body, end = appendReportGroup(b.body[:0], es)
	} else {
		b.body, end = appendGroup(b.body[:0], es, 0)
	}
	part := es[:end]
	*own = part
	if end < len(es) {
		q.sendRest(es[end:])
	}
	switch {
	case len(part) == 1:
		q.sendAlone(part[0])
	case part[0].out != nil:
		c.reportGroup(q, part, b, own)
	default:
		c.checkGroup(q, part, b, own)
	}
}

// sendAlone makes e's call of its own, its connection taken and the
// breaker's leave given, and answers it.
func (q *checkQueue) sendAlone(e *checkEntry) {
	if e.out != nil {
		e.r, e.err = q.c.reportAllowed(e.out, e.tell)
	} else {
		e.d, e.err = q.c.checkAllowed(e.ctx, e.req, e.tell)
	}
	e.finish()
}

// sendRest sends es, entries of a group allowed by the breaker that did
// not fit in its first call, at once, from a goroutine of its own that
// waits for a connection of its own, as their own calls would.
func (q *checkQueue) sendRest(es []*checkEntry) {
	q.goOnOwnConn(es, func(own *[]*checkEntry) { q.sendAllowed(es, own) })
}

// goOnOwnConn calls send, which answers es (allowed by the breaker) and
// sets *own to those it answers, from a goroutine of its own, as a call on
// its way, once it holds a connection of its own: the wait as a single
// call's, bounded by Timeout. When none comes, es fail as such a call
// does, the breaker hearing nothing of them (the limiter not asked).
func (q *checkQueue) goOnOwnConn(es []*checkEntry, send func(own *[]*checkEntry)) {
	q.mu.Lock()
	q.inflight++
	q.mu.Unlock()
	go func() {
		defer q.returned()
		own := es
		defer func() { q.recovered(own, recover()) }()
		if err := q.c.acquire(context.Background()); err != nil {
			for _, e := range es {
				e.breakerDone = nil
				q.answer(e, &Error{Op: e.op(), Err: err})
			}
			return
		}
		defer q.c.release()
		send(&own)
	}()
}

// resendApart sends each of es again in a call of its own, the limiter
// (or a proxy) having refused their batch (400, 413, 422: nothing decided
// or recorded): each asks the breaker again, as its own call would; the
// first goes on the connection its goroutine holds, the others at once,
// each from a goroutine of its own waiting for a connection of its own,
// not one after the other. *own is set to the entries this goroutine
// answers.
func (q *checkQueue) resendApart(es []*checkEntry, own *[]*checkEntry) {
	c := q.c
	allowed := make([]*checkEntry, 0, len(es))
	for _, x := range es {
		x.tell(nil) // the limiter answered: no failure
		done, err := c.breaker.Allow()
		if err != nil {
			c.stats.breakerOpen.Add(1)
			q.answer(x, &Error{Op: x.op(), Err: ErrBreakerOpen})
			continue
		}
		x.breakerDone = done
		allowed = append(allowed, x)
	}
	*own = allowed
	if len(allowed) == 0 {
		return
	}
	*own = allowed[:1]
	for _, x := range allowed[1:] {
		q.goOnOwnConn([]*checkEntry{x}, func(*[]*checkEntry) { q.sendAlone(x) })
	}
	q.sendAlone(allowed[0])
}

// answer ends e's wait with the decision Check gives a check whose call
// failed with err.
func (q *checkQueue) answer(e *checkEntry, err error) {
	if e.out != nil { // a report: its error
		e.err = err
		q.c.failed("report", err)
		e.finish()
		return
	}
	e.d = q.c.undecided(e.ctx, e.req, err)
	e.err = err
	q.c.failed("check", err)
	e.finish()
}

// batchable reports whether req may go in a batch: whether the limiter
// would accept it (fields.go sends every text field in a form it accepts;
// what is left is checked here). The limiter refuses a whole batch for one
// invalid check: such a check goes alone, to be refused alone.
func batchable(r *Request) bool {
	if r.Endpoint == "" || r.Cost < 0 || r.Cost > maxCost || len(r.Attributes) > maxAttributes {
		return false
	}
	for name := range r.Attributes {
		if name == "" {
			return false
		}
	}
	if long(r.Attributes) || len(r.Endpoint) > maxEndpoint || len(r.UserID) > maxUserID || len(r.Tier) > maxTier {
		return false // cut and marked as sent: valid, but long; alone
	}
	_, err := netip.ParseAddr(r.IP)
	return err == nil
}

// checkOne makes req's call of its own, as Check always did.
func (c *Client) checkOne(ctx context.Context, req *Request) (Decision, error) {
	b := c.bufs.Get().(*callBuf)
	defer c.bufs.Put(b)
	b.body = appendCheck(b.body[:0], req)
	var d Decision
	err := c.call(ctx, "check", pathCheck, b, readCheck(&d, b))
	return c.checked(ctx, req, d, err)
}

// readCheck returns the reader of a check's own answer into d.
func readCheck(d *Decision, b *callBuf) func(*reply) error {
	return func(a *reply) error {
		if err := parseDecision(a.body, d); err != nil {
			return err
		}
		d.headers, b.headers = readLimitHeaders(a.header, b.headers)
		return nil
	}
}

// checked is what a check's own call gives its caller: d, or when the call
// failed with err, the failure policy's decision.
func (c *Client) checked(ctx context.Context, req *Request, d Decision, err error) (Decision, error) {
	if err != nil {
		d = c.undecided(ctx, req, err)
		c.failed("check", err)
		return d, err
	}
	return d, nil
}

// checkAllowed makes req's call of its own, its connection taken and the
// breaker's leave given (done).
func (c *Client) checkAllowed(ctx context.Context, req *Request, done func(error)) (Decision, error) {
	b := c.bufs.Get().(*callBuf)
	defer c.bufs.Put(b)
	b.body = appendCheck(b.body[:0], req)
	var d Decision
	err := c.guarded(done, func() error {
		if len(b.body) > maxBody { // as call refuses it: not sent
			return &Error{Op: "check", Err: fmt.Errorf("%w: a body of %d bytes, over the API's %d", ErrInvalid, len(b.body), maxBody)}
		}
		return c.roundTrip("check", pathCheck, b, time.Now().Add(c.cfg.Timeout), readCheck(&d, b))
	})
	return c.checked(ctx, req, d, err)
}

// guarded runs f, a call the breaker allowed, and tells the breaker its
// error (done); a panic counts as a failure, then goes on.
func (c *Client) guarded(done func(error), f func() error) error {
	finished := false
	defer func() {
		if !finished {
			done(errPanicked)
		}
	}()
	err := f()
	finished = true
	done(err)
	return err
}

var errPanicked = errors.New("the call panicked")

// checkGroup sends the checks es, each allowed by the breaker, in one
// batch, b.body, and answers each.
func (c *Client) checkGroup(q *checkQueue, es []*checkEntry, b *callBuf, own *[]*checkEntry) {
	ds := make([]Decision, len(es))
	errs := make([]batchError, len(es))
	err := c.roundTrip("check", pathCheckBatch, b, time.Now().Add(c.cfg.Timeout), func(a *reply) error {
		return parseBatch(a.body, ds, errs)
	})
	if err != nil {
		q.batchFailed(es, err, own)
		return
	}
	for i, e := range es {
		if errs[i].msg == "" {
			e.tell(nil)
			e.d = ds[i]
			e.finish()
			continue
		}
		// The entry's status is what a single check's answer would have
		// had, its body the entry's error.
		err := &Error{Op: "check", Answered: true, Status: int(errs[i].status), Message: errs[i].msg}
		if errs[i].denyRule {
			err.denyRule = ds[i].RuleID
		}
		e.tell(err)
		q.answer(e, err)
	}
}

// batchFailed answers the checks (or reports) of a batch whose call
// failed with err. A refusal of the batch (400, 413, 422) decided or
// recorded none of them: an older limiter that does not know "headers"
// (then batches are off for good), or one stricter than batchable or
// validOutcome; so did a 404 or 405, a limiter or gateway with no batch
// route (off for good too). Each is then sent again alone, to get its own
// answer.
func (q *checkQueue) batchFailed(part []*checkEntry, err error, own *[]*checkEntry) {
	var e *Error
	if errors.As(err, &e) && e.Answered && (refusesRequest(e.Status) || noBatchRoute(e.Status)) {
		if noBatchRoute(e.Status) || (part[0].out == nil && strings.Contains(e.Message, `"headers"`)) {
			q.turnOff()
		}
		q.resendApart(part, own)
		return
	}
	for _, x := range part {
		x.tell(err)
		// Each caller gets an error of its own: undecided marks it.
		own := &Error{Op: x.op(), Err: err}
		if e != nil {
			cp := *e
			own = &cp
		}
		q.answer(x, own)
	}
}

// noBatchRoute reports whether a batch's answer status says the limiter,
// or a proxy in front of it, serves no batch route (404, 405): a limiter
// older than batches, or a gateway routing /v1/check alone. Nothing was
// decided; the calls go one by one from then on.
func noBatchRoute(status int) bool {
	return status == http.StatusNotFound || status == http.StatusMethodNotAllowed
}

// turnOff stops q's batching for good: each call goes on its own.
func (q *checkQueue) turnOff() {
	q.mu.Lock()
	q.off = true
	q.mu.Unlock()
}

// appendGroup appends the body of POST /v1/check/batch with the checks of
// es from start on, as many as fit in the API's maxBody (at least one),
// and returns it with the index after the last.
func appendGroup(b []byte, es []*checkEntry, start int) ([]byte, int) {
	b = append(b, `{"headers":true,"checks":[`...)
	end := start
	for end < len(es) && end-start < maxBatch {
		n := len(b)
		if end > start {
			b = append(b, ',')
		}
		b = appendCheck(b, es[end].req)
		if end > start && len(b)+len("]}") > maxBody {
			b = b[:n]
			break
		}
		end++
	}
	return append(b, "]}"...), end
}

// reportOne makes o's call of its own, as Report always did.
func (c *Client) reportOne(o *Outcome) (ReportResult, error) {
	b := c.bufs.Get().(*callBuf)
	defer c.bufs.Put(b)
	b.body = appendOutcome(b.body[:0], o)
	var r ReportResult
	err := c.call(context.Background(), "report", pathReport, b, func(a *reply) error {
		return parseReportBody(a.body, &r)
	})
	if err != nil {
		c.failed("report", err)
	}
	return r, err
}

// reportAllowed makes o's call of its own, its connection taken and the
// breaker's leave given (done).
func (c *Client) reportAllowed(o *Outcome, done func(error)) (ReportResult, error) {
	b := c.bufs.Get().(*callBuf)
	defer c.bufs.Put(b)
	b.body = appendOutcome(b.body[:0], o)
	var r ReportResult
	err := c.guarded(done, func() error {
		if len(b.body) > maxBody {
			return &Error{Op: "report", Err: fmt.Errorf("%w: a body of %d bytes, over the API's %d", ErrInvalid, len(b.body), maxBody)}
		}
		return c.roundTrip("report", pathReport, b, time.Now().Add(c.cfg.Timeout), func(a *reply) error {
			return parseReportBody(a.body, &r)
		})
	})
	if err != nil {
		c.failed("report", err)
	}
	return r, err
}

// appendReportGroup appends the body of POST /v1/report/batch with the
// reports of es, as many as fit in the API's maxBody (at least one), and
// returns it with the index after the last.
func appendReportGroup(b []byte, es []*checkEntry) ([]byte, int) {
	b = append(b, `{"reports":[`...)
	end := 0
	for end < len(es) && end < maxBatch {
		n := len(b)
		if end > 0 {
			b = append(b, ',')
		}
		b = appendOutcome(b, es[end].out)
		if end > 0 && len(b)+len("]}") > maxBody {
			b = b[:n]
			break
		}
		end++
	}
	return append(b, "]}"...), end
}

// reportGroup sends the reports es, each allowed by the breaker, in one
// batch, b.body, and answers each (a failed batch: batchFailed).
func (c *Client) reportGroup(q *checkQueue, es []*checkEntry, b *callBuf, own *[]*checkEntry) {
	rs := make([]ReportResult, 0, len(es))
	err := c.roundTrip("report", pathReportBatch, b, time.Now().Add(c.cfg.Timeout), func(a *reply) error {
		return parseReports(a.body, len(es), &rs)
	})
	if err != nil {
		q.batchFailed(es, err, own)
		return
	}
	for i, x := range es {
		x.tell(nil)
		x.r = rs[i]
		x.finish()
	}
}
