package redisstore

import (
	"context"
	"sync"
	"time"
)

// tripContext is the context of one lane worker's round trips, reused from
// one to the next. context.WithTimeout costs five allocations a round trip
// (the context, its timer, the done channel go-redis asks for on every
// command); this one allocates only when a round trip timed out (a new done
// channel for the next one).
//
// It is context.WithTimeout(context.Background(), timeout) for the round
// trip between startLate and end: Deadline reports the deadline, Done is closed
// and Err is context.DeadlineExceeded once it passes, Value is nil. Only
// the worker calls startLate and end; go-redis uses it on the worker's
// goroutine, only while the round trip runs.
//
// A round trip may also have an earlier deadline of its callers' (see
// startLate): when it passes with the round trip still out, the trip calls
// late once, and the round trip goes on to its own deadline.
type tripContext struct {
	timer *time.Timer // calls expire at the deadline

	mu       sync.Mutex
	deadline time.Time
	running  bool          // between startLate and end
	done     chan struct{} // closed when the deadline of a round trip passed
	err      error         // context.DeadlineExceeded once done is closed

	answerBy time.Time // the callers' deadline; zero: none, or passed
	late     func()    // called at answerBy, under mu
	wasLate  bool      // late was called in this round trip
}

var _ context.Context = (*tripContext)(nil)

func newTripContext() *tripContext {
	c := &tripContext{done: make(chan struct{})}
	c.timer = time.AfterFunc(time.Hour, c.expire)
	c.timer.Stop()
	return c
}

// startLate begins a round trip that must end within timeout, whose
// callers must be answered within answer (at most timeout): if it is still
// out then, late is called, once; the round trip goes on.
func (c *tripContext) startLate(answer, timeout time.Duration, late func()) context.Context {
	now := time.Now()
	c.mu.Lock()
	if c.err != nil { // the last round trip timed out
		c.done, c.err = make(chan struct{}), nil
	}
	c.deadline = now.Add(timeout)
	c.answerBy, c.late, c.wasLate = time.Time{}, nil, false
	first := timeout
	if late != nil && answer < timeout {
		c.answerBy, c.late, first = now.Add(answer), late, answer
	}
	c.running = true
	c.mu.Unlock()
	c.timer.Reset(first)
	return c
}

// end ends the round trip and reports whether late was called: then its
// callers have been answered already.
func (c *tripContext) end() (wasLate bool) {
	c.timer.Stop() // a call of expire already under way finds running false
	c.mu.Lock()
	c.running = false
	wasLate, c.late = c.wasLate, nil
	c.mu.Unlock()
	return wasLate
}

// expire calls late when a round trip is running past its callers'
// deadline and closes done when it is running past its own; a late call
// (the timer of an earlier round trip, stopped too late) finds none, or
// one whose deadline has not passed.
func (c *tripContext) expire() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.running || c.err != nil {
		return
	}
	now := time.Now()
	if !c.answerBy.IsZero() {
		if left := c.answerBy.Sub(now); left > 0 {
			c.timer.Reset(left)
			return
		}
		c.answerBy, c.wasLate = time.Time{}, true
		c.late()
	}
	if left := c.deadline.Sub(now); left > 0 {
		c.timer.Reset(left)
		return
	}
	c.err = context.DeadlineExceeded
	close(c.done)
}

func (c *tripContext) Deadline() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.deadline, true
}

func (c *tripContext) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.done
}

func (c *tripContext) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *tripContext) Value(any) any { return nil }
