package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden/internal/decide"
)

// DefaultWait is the limiter's CoalesceConfig.Wait. On the development
// machine it kept most of what an unbounded wait saved with a local Redis
// and cost a distant one (about 1 ms away) no throughput; 500 µs saved no
// more (README, Performance: One round trip at a time).
const DefaultWait = 200 * time.Microsecond

// errClosed is returned by a Coalescer after Close.
var errClosed = errors.New("redis coalescer closed")

// errUnsent is the error of calls refused without being sent, so that they
// cost nothing, because their lane's queue may not move within their
// deadline: a worker of the lane reads a late reply that no other could
// take the place of (LateWorkers per pipeline already do). It is a timeout,
// not Unreached: the node is slow rather than known down, and a local rule
// must not admit on a local budget while it counts the other limiters'
// calls.
var errUnsent = fmt.Errorf("redis calls not sent: their node's connections are reading late replies: %w",
	context.DeadlineExceeded)

// CoalesceConfig tunes a Coalescer.
type CoalesceConfig struct {
	// Pipelines is the number of round trips in flight at once per Redis
	// node, each on its own connection (default 4).
	Pipelines int
	// Wait is how long calls wait for a round trip in flight that is not
	// full before another round trip may leave beside it. Calls arriving
	// meanwhile share the next round trip: with a nearby node, whose
	// round trips come back within Wait, one at a time is in flight and
	// each carries more calls, sparing Redis's and the limiter's system
	// calls and wake-ups; with a distant one, round trips still overlap,
	// Wait apart. A full round trip (Limit calls) never waits. Zero: a
	// free connection sends at once (DefaultWait is the limiter's).
	Wait time.Duration
	// Limit caps the calls sent in one pipeline (default 64).
	Limit int
	// Window, when positive, holds a pipeline open this long for more calls
	// once it has one. Zero sends as soon as a connection is free: under
	// light load a call goes alone and at once, under heavy load calls pile
	// up while the connections are busy and share the next round trip.
	Window time.Duration
	// Timeout bounds how long a round trip's callers wait for its reply
	// (default 1s); each caller's own context still bounds its wait.
	Timeout time.Duration
	// LateWait is how long a round trip's connection keeps reading its
	// reply once Timeout has passed and its callers have been answered
	// with a *LateError; what Redis admitted for the requests they then
	// refused is given back when it comes. Meanwhile another worker takes
	// the late one's place, up to LateWorkers per pipeline. Zero: a round
	// trip ends at Timeout, its reply is lost, and nothing is given back.
	LateWait time.Duration
	// NodeFailures is the number of consecutive failed round trips after
	// which a node's calls fail at once, without a round trip, for
	// NodeRetry (defaults 3 and 1s); then one round trip probes the node.
	NodeFailures int
	NodeRetry    time.Duration
	// ProbeTimeout bounds the ping that tells a slow node from a dead one
	// when round trips to it timed out (default 1s): only a node that does
	// not answer it is treated as down.
	ProbeTimeout time.Duration
	// OnFlush, if set, is told the number of calls of every pipeline sent.
	OnFlush func(calls int)
	// Registerer, if set, gets rate_limit_redis_pipeline_calls, the
	// histogram of the calls per pipeline.
	Registerer prometheus.Registerer
}

// Coalescer shares Redis round trips between concurrent decisions, as
// Envoy's ratelimit does with its pipeline window: fewer system calls and
// fewer reads and writes for Redis, so throughput approaches what Redis
// itself can execute. Every call is still one atomic script, so batching
// changes no decision.
//
// Calls are grouped per Redis node: on a cluster each primary has its own
// lane (queue, pipelines and breaker), so a slow or dead primary delays and
// fails only the calls whose keys it serves. A request whose calls live on
// several nodes is split between their lanes and answered when all are done.
type Coalescer struct {
	store   *Store
	cluster *redis.ClusterClient // nil: a single server, one lane
	cfg     CoalesceConfig
	quit    chan struct{}
	workers sync.WaitGroup
	close   sync.Once
	items   sync.Pool

	probes    *prometheus.CounterVec // by probeSlow, probeDown; nil without a Registerer
	giveBacks *giveBacks             // nil without LateWait

	single *lane // the lane of a single server
	mu     sync.RWMutex
	lanes  map[string]*lane // by node address, on a cluster; guarded by mu
	closed bool             // guarded by mu
}

// pending is one caller's calls, decided by one lane or split among several.
type pending struct {
	calls   []decide.Call
	results []decide.Result // written by the lanes at their calls' positions
	left    atomic.Int32    // parts not yet decided
	mu      sync.Mutex      // guards err and late
	err     error
	late    *lateCalls // set when a part was answered late: p is no longer reused
	done    chan struct{}
}

// abandon answers the part pt of p at its callers' deadline, its round
// trip still out: the caller gets a *LateError, and the lane delivers the
// part's reply to p.late when it comes.
func (p *pending) abandon(pt part, gb *giveBacks) {
	p.mu.Lock()
	if p.late == nil {
		p.late = newLateCalls(gb, p.calls)
	}
	p.err = errLate // over any other: an outcome may be unknown
	late := p.late
	p.mu.Unlock()
	late.await(pt.idx)
	p.finish()
}

// fail records err as the caller's error unless one is recorded already.
func (p *pending) fail(err error) {
	p.mu.Lock()
	if p.err == nil {
		p.err = err
	}
	p.mu.Unlock()
}

// finish marks one part decided and wakes the caller after the last.
func (p *pending) finish() {
	if p.left.Add(-1) == 0 {
		p.done <- struct{}{}
	}
}

// part is the share of a pending that one lane decides.
type part struct {
	p   *pending
	idx []int // positions in p.calls; nil: all of them
}

func (pt part) size() int {
	if pt.idx == nil {
		return len(pt.p.calls)
	}
	return len(pt.idx)
}

// NewCoalescer starts the pipeline workers; Close stops them. On a cluster
// (store's client is a *redis.ClusterClient) the lanes of the nodes are
// started as their first calls arrive.
func NewCoalescer(store *Store, cfg CoalesceConfig) *Coalescer {
	if cfg.Pipelines <= 0 {
		cfg.Pipelines = 4
	}
	if cfg.Limit <= 0 {
		cfg.Limit = 64
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = time.Second
	}
	if cfg.NodeFailures <= 0 {
		cfg.NodeFailures = 3
	}
	if cfg.NodeRetry <= 0 {
		cfg.NodeRetry = time.Second
	}
	if cfg.ProbeTimeout <= 0 {
		cfg.ProbeTimeout = time.Second
	}
	if cfg.Registerer != nil {
		calls := promauto.With(cfg.Registerer).NewHistogram(prometheus.HistogramOpts{
			Name:    "rate_limit_redis_pipeline_calls",
			Help:    "Decision calls sent per Redis round trip (concurrent checks share pipelines).",
			Buckets: prometheus.ExponentialBuckets(1, 2, 9),
		})
		if onFlush := cfg.OnFlush; onFlush != nil {
			cfg.OnFlush = func(n int) { calls.Observe(float64(n)); onFlush(n) }
		} else {
			cfg.OnFlush = func(n int) { calls.Observe(float64(n)) }
		}
	}
	c := &Coalescer{store: store, cfg: cfg, quit: make(chan struct{}), lanes: map[string]*lane{}}
	if cfg.Registerer != nil {
		c.probes = promauto.With(cfg.Registerer).NewCounterVec(prometheus.CounterOpts{
			Name: "rate_limit_redis_node_probes_total",
			Help: "Pings of a Redis node after round trips to it timed out, by what they found: slow (it answered; its calls kept going to it) or down (its calls fail at once for a second, decided by their rules' on_redis_failure).",
		}, []string{"result"})
		c.probes.WithLabelValues(probeSlow)
		c.probes.WithLabelValues(probeDown)
	}
	if cfg.LateWait > 0 {
		c.giveBacks = newGiveBacks(store, cfg.Timeout+cfg.LateWait, cfg.Registerer)
	}
	c.items.New = func() any { return &pending{done: make(chan struct{}, 1)} }
	c.cluster, _ = store.client.(*redis.ClusterClient)
	if c.cluster == nil {
		node, _ := store.client.(*redis.Client) // Sentinel's failover client is one too
		c.single = c.startLane("", node)
	}
	return c
}

// Decide decides calls in pipelines shared with other callers. It returns
// when the results arrive or ctx ends, whichever is first. On a cluster, an
// error of a call whose node fails is a *nodeError.
func (c *Coalescer) Decide(ctx context.Context, calls []decide.Call) ([]decide.Result, error) {
	if len(calls) == 0 {
		return nil, nil
	}
	results := make([]decide.Result, len(calls))
	answered, err := c.decide(ctx, calls, results)
	if !answered {
		return nil, err
	}
	return results, err
}

// DecideInto is Decide writing the results into results (at least as long
// as calls) rather than a new slice: the limiter's decisions reuse theirs.
func (c *Coalescer) DecideInto(ctx context.Context, calls []decide.Call, results []decide.Result) error {
	if len(calls) == 0 {
		return nil
	}
	_, err := c.decide(ctx, calls, results[:len(calls)])
	return err
}

// decide decides calls into results (of the same length); answered is
// false when it returned before the lanes answered (ctx ended, or Close).
func (c *Coalescer) decide(ctx context.Context, calls []decide.Call, results []decide.Result) (answered bool, err error) {
	if err := ctx.Err(); err != nil { // select below picks at random among ready cases
		return false, err
	}
	lanes, parts, err := c.route(ctx, calls)
	if err != nil {
		return false, err
	}
	p := c.items.Get().(*pending)
	p.calls, p.err = calls, nil
	p.results = append(p.results[:0], make([]decide.Result, len(calls))...)
	p.left.Store(int32(len(lanes)))
	for i, l := range lanes {
		pt := part{p: p}
		if parts != nil {
			pt.idx = parts[i]
		}
		if l.stuck.Load() > 0 {
			p.fail(errUnsent)
			p.finish()
			continue
		}
		select {
		case l.queue <- pt:
		case <-ctx.Done():
			if i == 0 { // no lane has p: it can be reused
				c.items.Put(p)
			}
			return false, ctx.Err()
		case <-c.quit:
			return false, errClosed
		}
	}
	select {
	case <-p.done:
		// The lanes write into p, not into results: a caller that gave up
		// (below) must not have its slice written to later.
		if p.late != nil { // p now waits for late replies: not reused
			p.late.answered(p.results)
			return false, &LateError{late: p.late}
		}
		copy(results, p.results)
		err := p.err
		p.calls = nil
		c.items.Put(p)
		return true, err
	case <-ctx.Done():
		// A worker may still own p and write to it: leave it to the
		// garbage collector rather than reuse it.
		return false, ctx.Err()
	case <-c.quit:
		return false, errClosed
	}
}

// route returns the lanes that decide calls and, when there are several,
// the positions of the calls each decides (parts[i] for lanes[i]; nil when
// one lane decides them all, the usual case, which allocates nothing).
func (c *Coalescer) route(ctx context.Context, calls []decide.Call) ([]*lane, [][]int, error) {
	if c.cluster == nil {
		return c.single.alone, nil, nil
	}
	first, err := c.laneOf(ctx, calls[0].Keys.State)
	if err != nil {
		return nil, nil, callError(calls[0], err)
	}
	same := true
	for i := 1; i < len(calls) && same; i++ {
		l, err := c.laneOf(ctx, calls[i].Keys.State)
		if err != nil {
			return nil, nil, callError(calls[i], err)
		}
		same = l == first
	}
	if same {
		return first.alone, nil, nil
	}
	var lanes []*lane
	var parts [][]int
	for i := range calls {
		l, err := c.laneOf(ctx, calls[i].Keys.State)
		if err != nil {
			return nil, nil, callError(calls[i], err)
		}
		j := 0
		for j < len(lanes) && lanes[j] != l {
			j++
		}
		if j == len(lanes) {
			lanes = append(lanes, l)
			parts = append(parts, nil)
		}
		parts[j] = append(parts[j], i)
	}
	return lanes, parts, nil
}

// laneOf returns the lane of the primary serving key, as the cluster
// client's slot map has it, starting the lane at its first call.
func (c *Coalescer) laneOf(ctx context.Context, key string) (*lane, error) {
	node, err := c.cluster.MasterForKey(ctx, key)
	if err != nil {
		return nil, err
	}
	addr := node.Options().Addr
	c.mu.RLock()
	l := c.lanes[addr]
	c.mu.RUnlock()
	if l != nil {
		return l, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errClosed
	}
	if l = c.lanes[addr]; l == nil {
		l = c.startLane(addr, node)
		c.lanes[addr] = l
	}
	return l, nil
}

// othersHealthy reports whether a lane other than l has its breaker closed:
// then l's failure concerns part of Redis only.
func (c *Coalescer) othersHealthy(l *lane) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, o := range c.lanes {
		if o != l && !o.isOpen() {
			return true
		}
	}
	return false
}

// Close stops the workers after their current round trip; callers waiting
// in the queues get errClosed.
func (c *Coalescer) Close() {
	c.close.Do(func() {
		c.mu.Lock()
		c.closed = true
		c.mu.Unlock()
		close(c.quit)
	})
	c.workers.Wait() // the probes and late workers too: each lane's prober is free
	if c.giveBacks != nil {
		c.giveBacks.stop()
	}
	drain := func(l *lane) {
		if l.prober != nil {
			_ = l.prober.Close()
			l.prober = nil
		}
		for {
			select {
			case pt := <-l.queue:
				pt.p.fail(errClosed)
				pt.p.finish()
			default:
				return
			}
		}
	}
	if c.single != nil {
		drain(c.single)
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, l := range c.lanes {
		drain(l)
	}
}
