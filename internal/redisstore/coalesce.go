package redisstore

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
)

// ErrClosed is returned by a Coalescer after Close.
var ErrClosed = errors.New("redis coalescer closed")

// CoalesceConfig tunes a Coalescer.
type CoalesceConfig struct {
	// Pipelines is the number of round trips in flight at once, each on its
	// own connection (default 4).
	Pipelines int
	// Limit caps the calls sent in one pipeline (default 64).
	Limit int
	// Window, when positive, holds a pipeline open this long for more calls
	// once it has one. Zero sends as soon as a connection is free: under
	// light load a call goes alone and at once, under heavy load calls pile
	// up while the connections are busy and share the next round trip.
	Window time.Duration
	// Timeout bounds one pipeline round trip (default 1s); each caller's own
	// context still bounds its wait.
	Timeout time.Duration
	// OnFlush, if set, is told the number of calls of every pipeline sent.
	OnFlush func(calls int)
}

// Coalescer shares Redis round trips between concurrent decisions, as
// Envoy's ratelimit does with its pipeline window: fewer system calls and
// fewer reads and writes for Redis, so throughput approaches what Redis
// itself can execute. Every call is still one atomic script, so batching
// changes no decision.
type Coalescer struct {
	store   *Store
	cfg     CoalesceConfig
	queue   chan *pending
	quit    chan struct{}
	workers sync.WaitGroup
	close   sync.Once
	items   sync.Pool
}

// pending is one caller's calls waiting for a pipeline.
type pending struct {
	calls   []decide.Call
	results []decide.Result
	err     error
	done    chan struct{}
}

// NewCoalescer starts the pipeline workers; Close stops them.
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
	c := &Coalescer{store: store, cfg: cfg, queue: make(chan *pending, cfg.Limit*cfg.Pipelines), quit: make(chan struct{})}
	c.items.New = func() any { return &pending{done: make(chan struct{}, 1)} }
	for range cfg.Pipelines {
		c.workers.Go(c.work)
	}
	return c
}

// Decide decides calls in a pipeline shared with other callers. It returns
// when the results arrive or ctx ends, whichever is first.
func (c *Coalescer) Decide(ctx context.Context, calls []decide.Call) ([]decide.Result, error) {
	if len(calls) == 0 {
		return nil, nil
	}
	if err := ctx.Err(); err != nil { // select below picks at random among ready cases
		return nil, err
	}
	p := c.items.Get().(*pending)
	p.calls, p.err = calls, nil
	p.results = p.results[:0]
	select {
	case c.queue <- p:
	case <-ctx.Done():
		c.items.Put(p)
		return nil, ctx.Err()
	case <-c.quit:
		c.items.Put(p)
		return nil, ErrClosed
	}
	select {
	case <-p.done:
		results, err := append([]decide.Result(nil), p.results...), p.err
		p.calls = nil
		c.items.Put(p)
		return results, err
	case <-ctx.Done():
		// The worker may still own p and write to it: leave it to the
		// garbage collector rather than reuse it.
		return nil, ctx.Err()
	case <-c.quit:
		return nil, ErrClosed
	}
}

// Close stops the workers after their current round trip; callers waiting
// in the queue get ErrClosed.
func (c *Coalescer) Close() {
	c.close.Do(func() { close(c.quit) })
	c.workers.Wait()
	for {
		select {
		case p := <-c.queue:
			p.err = ErrClosed
			p.done <- struct{}{}
		default:
			return
		}
	}
}

func (c *Coalescer) work() {
	var (
		batch   []*pending
		calls   []decide.Call
		results []decide.Result
	)
	for {
		select {
		case p := <-c.queue:
			batch = append(batch[:0], p)
		case <-c.quit:
			return
		}
		batch = c.fill(batch)
		calls = calls[:0]
		for _, p := range batch {
			calls = append(calls, p.calls...)
		}
		results = append(results[:0], make([]decide.Result, len(calls))...)
		if c.cfg.OnFlush != nil {
			c.cfg.OnFlush(len(calls))
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Timeout)
		errs := c.store.run(ctx, calls, results)
		cancel()
		off := 0
		for _, p := range batch {
			n := len(p.calls)
			p.results = append(p.results, results[off:off+n]...)
			for i := off; errs != nil && i < off+n; i++ {
				if errs[i] != nil {
					p.err = errs[i]
					break
				}
			}
			off += n
			p.done <- struct{}{}
		}
		clear(calls) // drop references to the callers' keys
	}
}

// fill adds the calls already waiting, and with a window those arriving
// within it, up to the limit.
func (c *Coalescer) fill(batch []*pending) []*pending {
	n := len(batch[0].calls)
	var timeout <-chan time.Time
	if c.cfg.Window > 0 {
		t := time.NewTimer(c.cfg.Window)
		defer t.Stop()
		timeout = t.C
	}
	for n < c.cfg.Limit {
		select {
		case p := <-c.queue:
			batch = append(batch, p)
			n += len(p.calls)
			continue
		default:
		}
		if timeout == nil {
			return batch
		}
		select {
		case p := <-c.queue:
			batch = append(batch, p)
			n += len(p.calls)
		case <-timeout:
			return batch
		}
	}
	return batch
}
