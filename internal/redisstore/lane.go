package redisstore

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden/internal/decide"
)

// lane is the queue, pipeline workers and breaker of one Redis node.
type lane struct {
	c     *Coalescer
	addr  string // "" on a single server
	queue chan part
	// gather is the lane's one right to take calls from the queue. Its
	// worker keeps it through a round trip that is not full, up to
	// cfg.Wait, so calls arriving meanwhile wait and share the next round
	// trip rather than each taking a connection of its own; it passes it
	// on before a full one, so a backlog of whole pipelines goes out in
	// parallel, and after cfg.Wait, so a distant node's round trips
	// overlap.
	gather chan struct{}
	alone  []*lane       // itself: the route of calls it decides alone
	clock  *nodeClock    // the node's clock, for counted calls
	node   *redis.Client // a client of the node, whose options probes copy; nil: no probe (fails)
	prober *redis.Client // probes' own client, made at the first; owned by the probe under way

	readingLate atomic.Int64 // workers reading a late reply whose place another took
	// stuck counts the workers reading a late reply whose place none could
	// take: while there is one, the queue may not move within a caller's
	// deadline, and calls are refused unsent (errUnsent) instead.
	stuck atomic.Int64

	failures  atomic.Int64 // consecutive failed round trips
	timeouts  atomic.Int64 // of which with an unknown outcome (not Unreached)
	probing   atomic.Bool  // a probe of the node is under way
	openUntil atomic.Int64 // unix ns until which calls fail at once; 0: closed
}

// startLane starts the workers of the lane of the node at addr, whose
// client node is.
func (c *Coalescer) startLane(addr string, node *redis.Client) *lane {
	l := &lane{c: c, addr: addr, queue: make(chan part, c.cfg.Limit*c.cfg.Pipelines),
		gather: make(chan struct{}, 1), clock: c.store.clocks.of(addr), node: node}
	l.alone = []*lane{l}
	l.gather <- struct{}{}
	for range c.cfg.Pipelines {
		c.workers.Go(l.work)
	}
	return l
}

// LateWorkers bounds, per pipeline, the workers of a lane that read late
// replies while others took their places: with a node that stopped
// answering, the calls held for give-backs and the connections open.
const LateWorkers = 2

func (l *lane) work() {
	var (
		batch    []part
		calls    []decide.Call
		results  []decide.Result
		trip     = newTripContext()
		pipe     = l.c.store.client.Pipeline() // reused: Exec empties it
		holding  bool                          // l.gather
		wait     = l.c.cfg.Wait
		passOn   = time.AfterFunc(time.Hour, func() { l.gather <- struct{}{} })
		replaced bool // by another worker, while this one reads a late reply
		late     = func() { replaced = l.answerLate(batch) }
	)
	passOn.Stop()
	defer passOn.Stop()
	for {
		if !holding {
			select {
			case <-l.gather:
				holding = true
			case <-l.c.quit:
				return
			}
		}
		select {
		case pt := <-l.queue:
			batch = append(batch[:0], pt)
		case <-l.c.quit:
			return
		}
		var n int
		batch, n = l.fill(batch)
		if n >= l.c.cfg.Limit || wait <= 0 {
			l.gather <- struct{}{}
			holding = false
		} else {
			passOn.Reset(wait)
		}
		calls = calls[:0]
		for _, pt := range batch {
			if pt.idx == nil {
				calls = append(calls, pt.p.calls...)
				continue
			}
			for _, i := range pt.idx {
				calls = append(calls, pt.p.calls[i])
			}
		}
		results = append(results[:0], make([]decide.Result, len(calls))...)
		errs, wasLate := l.roundTrip(trip, pipe, calls, results, late)
		if holding && !passOn.Stop() {
			holding = false // passed on while the round trip was out
		}
		if wasLate {
			l.deliverLate(batch, results, errs)
			clear(calls)
			if replaced {
				if holding {
					l.gather <- struct{}{}
				}
				l.readingLate.Add(-1)
				return
			}
			l.stuck.Add(-1)
			continue
		}
		off := 0
		for _, pt := range batch {
			n, p := pt.size(), pt.p
			if pt.idx == nil {
				copy(p.results, results[off:off+n])
			} else {
				for j, i := range pt.idx {
					p.results[i] = results[off+j]
				}
			}
			for j := off; errs != nil && j < off+n; j++ { // errs is nil when all succeeded
				if errs[j] != nil {
					p.fail(errs[j])
					break
				}
			}
			off += n
			p.finish()
		}
		clear(calls) // drop references to the callers' keys
	}
}

// answerLate answers the callers of batch, a round trip still out at their
// deadline, with a *LateError, and starts a worker to take the place of the
// one reading the late reply, unless LateWorkers per pipeline already do;
// it reports whether it did. If not, the lane is stuck until this worker's
// reply comes (or LateWait passes): the calls queued meanwhile are refused
// unsent rather than held for it. It runs on the trip's timer, before the
// worker ends the round trip.
func (l *lane) answerLate(batch []part) (replaced bool) {
	for _, pt := range batch {
		pt.p.abandon(pt, l.c.giveBacks)
	}
	select {
	case <-l.c.quit:
	default:
		if l.readingLate.Add(1) <= int64(LateWorkers*l.c.cfg.Pipelines) {
			l.c.workers.Go(l.work)
			return true
		}
		l.readingLate.Add(-1)
	}
	l.stuck.Add(1)
	for {
		select {
		case pt := <-l.queue:
			pt.p.fail(errUnsent)
			pt.p.finish()
		default:
			return false
		}
	}
}

// deliverLate hands the late reply of batch (results and errs by position
// in the round trip) to the callers' late calls.
func (l *lane) deliverLate(batch []part, results []decide.Result, errs []error) {
	off := 0
	for _, pt := range batch {
		n := pt.size()
		var e []error
		if errs != nil {
			e = errs[off : off+n]
		}
		pt.p.late.deliver(pt.idx, results[off:off+n], e)
		off += n
	}
}

// roundTrip decides calls in one pipeline to the node, unless its breaker
// is open, and feeds the breaker. Errors of a failing node of a cluster are
// *nodeError. trip is the worker's context of its round trips, pipe its
// pipeline. With a LateWait, late is called if the reply has not come by
// Timeout, and wasLate says it was: the callers have their answer.
func (l *lane) roundTrip(trip *tripContext, pipe redis.Pipeliner, calls []decide.Call, results []decide.Result, late func()) (_ []error, wasLate bool) {
	cfg := &l.c.cfg
	if l.isOpen() {
		if l.c.cluster != nil {
			// No command reaches a node known down, so nothing else tells
			// the client when its replica has been promoted.
			l.c.cluster.ReloadState(context.Background())
		}
		errs := make([]error, len(calls))
		for i := range calls {
			errs[i] = l.fromNode(callError(calls[i], errNodeDown))
		}
		return errs, false
	}
	if cfg.OnFlush != nil {
		cfg.OnFlush(len(calls))
	}
	ctx := trip.startLate(cfg.Timeout, cfg.Timeout+cfg.LateWait, late) // no LateWait: no late call
	errs := l.c.store.run(ctx, l.clock, pipe, calls, results)
	wasLate = trip.end()
	var failed, unknown bool
	for i, err := range errs {
		if err != nil && nodeFailure(err) {
			failed = true
			unknown = unknown || !Unreached(err)
			errs[i] = l.fromNode(err)
		}
	}
	l.record(failed, unknown)
	return errs, wasLate
}

// fromNode wraps err of a cluster node; a single server's errors stay as
// they are.
func (l *lane) fromNode(err error) error {
	if l.addr == "" {
		return err
	}
	return &nodeError{addr: l.addr, partial: l.c.othersHealthy(l), err: err}
}

// record feeds the breaker one round trip: NodeFailures failed in a row
// open it for NodeRetry; the round trip after that tries the node again,
// and a success closes it. A slow node is not a dead one: when some of those
// round trips timed out (unknown, rather than refused), the node is first
// pinged (see probe) and the breaker opens only if the ping fails too;
// meanwhile calls keep going to the node. Calls the open breaker fails are
// Unreached, and the limiter's local rules decide them in memory: that must
// not happen while the node still counts the other limiters' calls.
func (l *lane) record(failed, unknown bool) {
	if !failed {
		if l.failures.Load() != 0 || l.openUntil.Load() != 0 { // no write when healthy
			l.failures.Store(0)
			l.timeouts.Store(0)
			l.openUntil.Store(0)
		}
		return
	}
	if unknown {
		l.timeouts.Add(1)
	}
	if l.failures.Add(1) < int64(l.c.cfg.NodeFailures) {
		return
	}
	if l.timeouts.Load() == 0 {
		l.open()
		return
	}
	if l.probing.CompareAndSwap(false, true) {
		l.c.workers.Go(l.probe)
	}
}

// open makes the node's calls fail at once for NodeRetry.
func (l *lane) open() {
	l.openUntil.Store(time.Now().Add(l.c.cfg.NodeRetry).UnixNano())
}

// probe pings the node, allowing it ProbeTimeout: an answer means the node
// is slow, not dead, and the failures are forgotten; no answer opens the
// breaker. The ping has a client of its own, with the node's options but
// ProbeTimeout for its timeouts: the decisions' client gives a connection's
// handshake and every reply the round-trip timeout, which a slow node
// exceeds by definition.
func (l *lane) probe() {
	defer l.probing.Store(false)
	if l.prober == nil && l.node != nil {
		o := *l.node.Options()
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout = l.c.cfg.ProbeTimeout, l.c.cfg.ProbeTimeout, l.c.cfg.ProbeTimeout
		o.PoolSize, o.MinIdleConns, o.MaxRetries = 1, 0, -1
		l.prober = redis.NewClient(&o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.c.cfg.ProbeTimeout)
	defer cancel()
	if l.prober == nil || l.prober.Ping(ctx).Err() != nil {
		l.c.countProbe(probeDown)
		l.open()
		return
	}
	l.c.countProbe(probeSlow)
	l.failures.Store(0)
	l.timeouts.Store(0)
}

// What a probe found: the labels of rate_limit_redis_node_probes_total.
const (
	probeSlow = "slow"
	probeDown = "down"
)

func (c *Coalescer) countProbe(result string) {
	if c.probes != nil {
		c.probes.WithLabelValues(result).Inc()
	}
}

// isOpen reports whether the node's calls fail without a round trip.
func (l *lane) isOpen() bool {
	until := l.openUntil.Load()
	return until != 0 && time.Now().UnixNano() < until
}

// fill adds the parts already waiting, and with a window those arriving
// within it, up to the limit of calls; n is the calls of the batch.
func (l *lane) fill(batch []part) (_ []part, n int) {
	n = batch[0].size()
	var timeout <-chan time.Time
	if l.c.cfg.Window > 0 {
		t := time.NewTimer(l.c.cfg.Window)
		defer t.Stop()
		timeout = t.C
	}
	for n < l.c.cfg.Limit {
		select {
		case pt := <-l.queue:
			batch = append(batch, pt)
			n += pt.size()
			continue
		default:
		}
		if timeout == nil {
			return batch, n
		}
		select {
		case pt := <-l.queue:
			batch = append(batch, pt)
			n += pt.size()
		case <-timeout:
			return batch, n
		}
	}
	return batch, n
}
