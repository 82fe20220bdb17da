package client

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// The outcomes of ReportAsync go out in batches (POST /v1/report/batch) of
// at most maxBatch outcomes and maxBody bytes, a batch at most every
// reportLinger once its first outcome is queued, filled by one goroutine
// and sent by reportSenders, so that up to reportSenders batches are on
// their way at once. One at a time would let the reports fall behind the
// checks, which go out on up to MaxConns connections, as soon as the
// outcomes are large: a batch holds only 7 outcomes of 8 KiB paths.
const (
	reportLinger  = 5 * time.Millisecond
	reportSenders = 4
)

// reporter sends queued outcomes in the background.
type reporter struct {
	c      *Client
	queue  chan Outcome
	mu     sync.RWMutex // guards closed against ReportAsync
	closed bool
	// full takes the batches to send, free gives them back once sent:
	// reportSenders batches in all.
	full, free chan *pending
	done       chan struct{}
}

func newReporter(c *Client, size int) *reporter {
	r := &reporter{c: c, queue: make(chan Outcome, size), done: make(chan struct{}),
		full: make(chan *pending), free: make(chan *pending, reportSenders)}
	var senders sync.WaitGroup
	for range reportSenders {
		r.free <- &pending{outcomes: make([]Outcome, 0, maxBatch)}
		senders.Go(func() {
			for p := range r.full {
				r.send(p)
				r.free <- p
			}
		})
	}
	go func() {
		r.fill()
		close(r.full)
		senders.Wait()
		close(r.done)
	}()
	return r
}

// ReportAsync queues o to be reported in the background and returns at
// once: the way to report from a request's path without adding its
// latency. It returns false when o was refused as invalid (see
// validOutcome: the limiter would refuse it, and with it the batch it
// would go out in) or dropped (the queue full, the client closed); Stats
// counts what is sent, refused, dropped and lost, and Config.OnError gets
// each with its cause. With o.Hold set, the report also releases that
// hold; a release refused, dropped or lost with its call is counted in
// Stats.HoldsLost too: its slot stays taken until the rule's hold
// lifetime has passed.
func (c *Client) ReportAsync(o *Outcome) bool {
	if err := validOutcome(o); err != nil {
		c.stats.reportsInvalid.Add(1)
		c.stats.holdsLost.Add(holds(o))
		c.failed("report", &Error{Op: "report", Err: fmt.Errorf("%w: %w", ErrInvalid, err)})
		return false
	}
	r := c.reports
	r.mu.RLock()
	closed := r.closed
	if !closed {
		select {
		case r.queue <- boundOutcome(*o):
			r.mu.RUnlock()
			return true
		default:
		}
	}
	r.mu.RUnlock()
	c.stats.reportsDropped.Add(1)
	c.stats.holdsLost.Add(holds(o))
	cause := ErrReportQueueFull
	if closed {
		cause = ErrClosed
	}
	c.failed("report", &Error{Op: "report", Err: cause})
	return false
}

// validOutcome returns why the limiter would refuse o, nil when it would
// not. Its text fields need no check: the client sends them in a form the
// limiter accepts (appendSubject).
func validOutcome(o *Outcome) error {
	switch {
	case o.Status == 0 && o.Hold != "": // a release only
	case o.Status < minStatus || o.Status > maxStatus:
		return fmt.Errorf("status %d: want an HTTP status, %d to %d", o.Status, minStatus, maxStatus)
	case o.Cost != CostNone && (o.Cost < 0 || o.Cost > maxCost):
		return fmt.Errorf("cost %d: want 0 to %d, or CostNone", o.Cost, maxCost)
	case o.Endpoint == "":
		return errors.New("endpoint: required")
	case len(o.Attributes) > maxAttributes:
		return fmt.Errorf("attributes: %d, at most %d", len(o.Attributes), maxAttributes)
	case badHold(o.Hold):
		return fmt.Errorf("hold: %w", errBadHold)
	}
	if _, err := netip.ParseAddr(o.IP); err != nil {
		return errors.New("ip: not an IP address")
	}
	for name := range o.Attributes {
		if name == "" {
			return errors.New("attributes: an empty name")
		}
	}
	return nil
}

// boundOutcome returns o with every field over the API's bound in the
// form it is sent in (appendSubject), cut and marked, and an invalid
// method left out, in memory of its own: a queued outcome holds no more
// than it sends, whatever the request it reports (a path of 1 MB, which
// net/http's default MaxHeaderBytes lets in, is kept as its 8 KiB). Each
// field's form is its own fixed point, so appendSubject sends it
// unchanged. o itself, with no allocation, when every field is within
// its bound.
func boundOutcome(o Outcome) Outcome {
	if len(o.Endpoint) > maxEndpoint {
		o.Endpoint = strings.Clone(wireEndpoint(o.Endpoint)) // not a slice of the whole
	}
	if len(o.UserID) > maxUserID {
		o.UserID = textField(o.UserID, maxUserID)
	}
	if len(o.Tier) > maxTier {
		o.Tier = textField(o.Tier, maxTier)
	}
	if !validMethod(o.Method) {
		o.Method = ""
	}
	for name, value := range o.Attributes {
		if len(name) > maxAttrName || len(value) > maxAttrValue {
			attrs := make(map[string]string, len(o.Attributes))
			for name, value := range o.Attributes {
				attrs[textField(name, maxAttrName)] = textField(value, maxAttrValue)
			}
			o.Attributes = attrs
			break
		}
	}
	return o
}

// pending is the batch the reporter fills: its outcomes and the body of
// POST /v1/report/batch that holds them, but for its closing "]}".
type pending struct {
	outcomes []Outcome
	body     []byte
}

// fill puts the queued outcomes in batches and hands each to a sender,
// until the queue is closed.
func (r *reporter) fill() {
	p := <-r.free
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		o, ok := <-r.queue
		if !ok {
			return
		}
		p = r.add(p, &o)
		timer.Reset(reportLinger)
	fill:
		for len(p.outcomes) < maxBatch {
			select {
			case o, ok := <-r.queue:
				if !ok {
					break fill
				}
				p = r.add(p, &o)
			case <-timer.C:
				break fill
			}
		}
		timer.Stop()
		p = r.hand(p)
	}
}

// hand gives the batch p to a sender, when it holds outcomes, and returns
// the batch to fill next: a free one, once a sender has sent its own when
// every batch is on its way.
func (r *reporter) hand(p *pending) *pending {
	if len(p.outcomes) == 0 {
		return p
	}
	r.full <- p
	return <-r.free
}

// add puts o in the batch p, after handing p to a sender first when o
// would take its body over maxBody, and returns the batch it is in. An
// outcome over maxBody alone is refused.
func (r *reporter) add(p *pending, o *Outcome) *pending {
	if len(p.outcomes) == 0 {
		p.body = append(p.body[:0], `{"reports":[`...)
	}
	n := len(p.body)
	if len(p.outcomes) > 0 {
		p.body = append(p.body, ',')
	}
	p.body = appendOutcome(p.body, o)
	if len(p.body)+len("]}") <= maxBody {
		p.outcomes = append(p.outcomes, *o)
		return p
	}
	p.body = p.body[:n]
	if len(p.outcomes) > 0 {
		return r.add(r.hand(p), o)
	}
	r.c.stats.reportsInvalid.Add(1)
	r.c.stats.holdsLost.Add(holds(o))
	r.c.failed("report", &Error{Op: "report", Err: fmt.Errorf("%w: an outcome of over %d bytes", ErrInvalid, maxBody)})
	return p
}

// send reports the batch, bounded by the client's timeout, and empties it.
func (r *reporter) send(p *pending) {
	batch := p.outcomes
	if len(batch) == 0 {
		return
	}
	defer func() { clear(batch); p.outcomes = batch[:0] }()
	p.body = append(p.body, "]}"...)
	// The call reads the body from a call's buffer, which takes it off
	// the call while a transport may still read it.
	b := r.c.bufs.Get().(*callBuf)
	own := b.body
	b.body = p.body
	_, err := r.c.reportBatch(b, len(batch))
	p.body, b.body = b.body, own
	r.c.bufs.Put(b)
	if err != nil && len(batch) > 1 && errors.Is(err, ErrInvalid) {
		// A limiter stricter than validOutcome (another version) refuses
		// the whole batch for one outcome: one by one, only the outcome at
		// fault is lost.
		for i := range batch {
			r.sendOne(&batch[i])
		}
		return
	}
	n := uint64(0)
	for i := range batch {
		n += holds(&batch[i])
	}
	switch {
	case err == nil:
		r.c.stats.reportsSent.Add(uint64(len(batch)))
		r.c.stats.holdsSent.Add(n)
		return
	case errors.Is(err, ErrInvalid):
		r.c.stats.reportsInvalid.Add(uint64(len(batch)))
	default:
		r.c.stats.reportsFailed.Add(uint64(len(batch)))
	}
	r.c.stats.holdsLost.Add(n)
	r.c.failed("report batch", err)
}

// sendOne reports one outcome, bounded by the client's timeout.
func (r *reporter) sendOne(o *Outcome) {
	_, err := r.c.Report(context.Background(), o)
	switch {
	case err == nil:
		r.c.stats.reportsSent.Add(1)
		r.c.stats.holdsSent.Add(holds(o))
		return
	case errors.Is(err, ErrInvalid):
		r.c.stats.reportsInvalid.Add(1)
	default:
		r.c.stats.reportsFailed.Add(1)
	}
	r.c.stats.holdsLost.Add(holds(o))
}

// holds is the number of holds o releases: 1 when it names one.
func holds(o *Outcome) uint64 {
	if o.Hold == "" {
		return 0
	}
	return 1
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
