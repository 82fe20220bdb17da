package client

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"
)

// The outcomes of ReportAsync go out in batches (POST /v1/report/batch) of
// at most reportBatch, one batch at most every reportLinger once the first
// outcome of a batch is queued, from one goroutine.
const (
	reportBatch  = 100
	reportLinger = 5 * time.Millisecond
)

// reporter sends queued outcomes in the background.
type reporter struct {
	c      *Client
	queue  chan Outcome
	mu     sync.RWMutex // guards closed against ReportAsync
	closed bool
	done   chan struct{}
}

func newReporter(c *Client, size int) *reporter {
	r := &reporter{c: c, queue: make(chan Outcome, size), done: make(chan struct{})}
	go r.run()
	return r
}

// ReportAsync queues o to be reported in the background and returns at
// once: the way to report from a request's path without adding its
// latency. It returns false when o was dropped (the queue full, the client
// closed); Stats counts what is sent, dropped and lost.
func (c *Client) ReportAsync(o *Outcome) bool {
	r := c.reports
	r.mu.RLock()
	defer r.mu.RUnlock()
	if !r.closed {
		select {
		case r.queue <- *o:
			return true
		default:
		}
	}
	c.stats.reportsDropped.Add(1)
	return false
}

func (r *reporter) run() {
	defer close(r.done)
	batch := make([]Outcome, 0, reportBatch)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		o, ok := <-r.queue
		if !ok {
			return
		}
		batch = append(batch[:0], o)
		timer.Reset(reportLinger)
	fill:
		for len(batch) < reportBatch {
			select {
			case o, ok := <-r.queue:
				if !ok {
					break fill
				}
				batch = append(batch, o)
			case <-timer.C:
				break fill
			}
		}
		timer.Stop()
		r.send(batch)
	}
}

// send reports a batch, bounded by the client's timeout.
func (r *reporter) send(batch []Outcome) {
	ctx, cancel := context.WithTimeout(context.Background(), r.c.cfg.Timeout)
	defer cancel()
	_, err := r.c.ReportBatch(ctx, batch)
	var e *Error
	if err != nil && len(batch) > 1 && errors.As(err, &e) && e.Answered &&
		(e.Status == http.StatusBadRequest || e.Status == http.StatusRequestEntityTooLarge) {
		// The limiter refuses a whole batch for one invalid outcome, or for
		// its size: one by one, only the outcome at fault is lost.
		for i := range batch {
			r.sendOne(&batch[i])
		}
		return
	}
	if err != nil {
		r.c.stats.reportsFailed.Add(uint64(len(batch)))
		return
	}
	r.c.stats.reportsSent.Add(uint64(len(batch)))
}

// sendOne reports one outcome, bounded by the client's timeout.
func (r *reporter) sendOne(o *Outcome) {
	ctx, cancel := context.WithTimeout(context.Background(), r.c.cfg.Timeout)
	defer cancel()
	if _, err := r.c.Report(ctx, o); err != nil {
		r.c.stats.reportsFailed.Add(1)
		return
	}
	r.c.stats.reportsSent.Add(1)
}

// close stops ReportAsync and waits, within ctx, for the queue to be sent.
func (r *reporter) close(ctx context.Context) error {
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		close(r.queue)
	}
	r.mu.Unlock()
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
