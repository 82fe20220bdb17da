// Package kafkabus is the Kafka adapter (kafka-go): the limiter's
// non-blocking producer (decisions, outcomes), the detector's ban publisher,
// the consume loop of the detector and the archiver (a consumer group,
// batches of event.Message, offsets committed once handled), and the checks
// that a broker answers and a topic exists.
package kafkabus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	"go.uber.org/zap"
)

// recordOverhead over-estimates the bytes a record adds to a produce request
// beyond its key and value, to reject events kafka-go would refuse as too
// large (which it does for the whole batch).
const recordOverhead = 128

// record is one queued event; smaller than a kafka.Message, so the queue
// costs ~48 bytes a slot.
type record struct{ key, value []byte }

// drainLinger is how long the drainer waits for more events when the queue
// holds less than a batch.
const drainLinger = time.Millisecond

var errTooLarge = errors.New("event larger than the producer's batch bytes")

// Producer publishes events to one topic without ever blocking the caller.
// Publish puts the event on a bounded queue; one goroutine drains the queue
// into kafka-go's async Writer, holding at most MaxInFlight events that the
// broker has not yet acknowledged. When the broker is slow or down, the
// in-flight bound stops the drainer, the queue fills and Publish drops and
// counts, so memory stays bounded; publishing resumes by itself when the
// broker returns.
type Producer struct {
	cfg       ProducerConfig
	log       *zap.Logger
	warn      *throttledLog
	metrics   *producerMetrics
	writer    *kafka.Writer
	transport *kafka.Transport

	mu     sync.RWMutex // guards closed and closing queue against Publish
	closed bool
	queue  chan record

	inflight  atomic.Int64  // handed to the writer, not yet completed
	holding   atomic.Int64  // taken off the queue, waiting for in-flight room
	released  chan struct{} // signals the drainer that in-flight dropped
	failed    atomic.Int64  // events counted as send_failed, ever
	abandoned atomic.Int64  // events dropped because Close ran out of time

	abortCtx  context.Context // cancelled when Close's ctx expires
	abort     context.CancelFunc
	drained   chan struct{} // closed when the drainer returns
	closeOnce sync.Once
	closeErr  error
}

// NewProducer validates cfg, registers the producer's metrics on reg (may be
// nil) and starts the drainer. Close must be called to stop it.
func NewProducer(cfg ProducerConfig, log *zap.Logger, reg prometheus.Registerer) (*Producer, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = zap.NewNop()
	}
	log = log.With(zap.String("topic", cfg.Topic))
	p := &Producer{
		cfg:      cfg,
		log:      log,
		warn:     newThrottledLog(log, 10*time.Second),
		queue:    make(chan record, cfg.QueueSize),
		released: make(chan struct{}, 1),
		drained:  make(chan struct{}),
	}
	p.metrics, err = newProducerMetrics(reg, cfg.Topic, p.queueLength)
	if err != nil {
		return nil, err
	}
	p.transport = &kafka.Transport{
		ClientID:    cfg.ClientID,
		DialTimeout: min(cfg.WriteTimeout, 5*time.Second),
	}
	debugLog, errorLog := kafkaLoggers(log, p.warn, nil)
	p.writer = &kafka.Writer{
		Addr:         kafka.TCP(cfg.Brokers...),
		Topic:        cfg.Topic,
		Balancer:     kafka.Murmur2Balancer{},
		MaxAttempts:  cfg.MaxAttempts,
		BatchSize:    cfg.BatchSize,
		BatchBytes:   int64(cfg.BatchBytes),
		BatchTimeout: cfg.BatchTimeout,
		ReadTimeout:  cfg.WriteTimeout,
		WriteTimeout: cfg.WriteTimeout,
		RequiredAcks: kafka.RequireOne,
		Async:        true,
		Completion:   p.completion,
		Logger:       debugLog,
		ErrorLogger:  errorLog,
		Transport:    p.transport,
	}
	p.abortCtx, p.abort = context.WithCancel(context.Background())
	go p.drain()
	return p, nil
}

// Publish enqueues one event and returns at once: false when the event was
// dropped (queue full, or the producer closed) and counted as such. The
// producer owns key and value from here on: the caller must not modify them.
func (p *Producer) Publish(key, value []byte) bool {
	p.mu.RLock()
	if p.closed {
		p.mu.RUnlock()
		p.metrics.droppedClosed.Inc()
		return false
	}
	select {
	case p.queue <- record{key: key, value: value}:
		p.mu.RUnlock()
		return true
	default:
		p.mu.RUnlock()
		p.metrics.droppedQueueFull.Inc()
		return false
	}
}

// Close stops intake, hands everything queued to the writer and waits for
// the broker to acknowledge it, all within ctx. It returns an error naming
// how many events could not be flushed, if any. Later calls return the
// first call's result.
func (p *Producer) Close(ctx context.Context) error {
	p.closeOnce.Do(func() { p.closeErr = p.shutdown(ctx) })
	return p.closeErr
}

func (p *Producer) shutdown(ctx context.Context) error {
	failedBefore := p.failed.Load()
	p.mu.Lock()
	p.closed = true
	close(p.queue)
	p.mu.Unlock()

	flushed := make(chan struct{})
	go func() {
		<-p.drained
		_ = p.writer.Close() // waits for every batch's Completion
		p.transport.CloseIdleConnections()
		close(flushed)
	}()
	var ctxErr error
	select {
	case <-flushed:
	case <-ctx.Done():
		ctxErr = ctx.Err()
		p.abort()
		<-p.drained
	}
	notFlushed := p.abandoned.Load() + p.failed.Load() - failedBefore
	if ctxErr != nil {
		// Still with the writer: they may yet be delivered (and counted) by
		// the writer's own retries, but Close cannot wait for them.
		notFlushed += p.inflight.Load()
		return fmt.Errorf("close kafka producer for topic %q: %d events not flushed: %w", p.cfg.Topic, notFlushed, ctxErr)
	}
	if notFlushed > 0 {
		return fmt.Errorf("close kafka producer for topic %q: %d events not flushed", p.cfg.Topic, notFlushed)
	}
	return nil
}

// drain is the one goroutine that moves events from the queue to the writer.
func (p *Producer) drain() {
	defer close(p.drained)
	batch := make([]record, 0, p.cfg.BatchSize)
	msgs := make([]kafka.Message, 0, p.cfg.BatchSize)
	for {
		if p.abortCtx.Err() != nil {
			p.abandonQueue()
			return
		}
		r, ok := <-p.queue
		if !ok {
			return
		}
		batch = append(batch[:0], r)
		if len(p.queue) < cap(batch)-1 {
			// Let a batch gather: kafka-go's WriteMessages costs about as
			// much for one event as for hundreds (partition lookup,
			// wake-ups), and the writer holds a batch for BatchTimeout
			// anyway.
			time.Sleep(drainLinger)
		}
	gather:
		for len(batch) < cap(batch) {
			select {
			case r, ok := <-p.queue:
				if !ok {
					break gather
				}
				batch = append(batch, r)
			default:
				break gather
			}
		}
		p.holding.Store(int64(len(batch)))
		acquired := p.acquire(int64(len(batch)))
		p.holding.Store(0)
		if !acquired {
			p.dropClosed(len(batch))
			p.abandonQueue()
			return
		}
		msgs = p.write(batch, msgs)
	}
}

// acquire waits until n more events fit in flight, or Close gives up.
// Only the drainer adds to inflight, so the check and the add cannot race.
func (p *Producer) acquire(n int64) bool {
	for p.inflight.Load()+n > int64(p.cfg.MaxInFlight) {
		select {
		case <-p.released:
		case <-p.abortCtx.Done():
			return false
		}
	}
	p.inflight.Add(n)
	return true
}

func (p *Producer) release(n int) {
	p.inflight.Add(-int64(n))
	select {
	case p.released <- struct{}{}:
	default:
	}
}

// write hands batch (already counted in flight) to the async writer; msgs
// is scratch space, returned for reuse (the writer copies the messages).
func (p *Producer) write(batch []record, msgs []kafka.Message) []kafka.Message {
	now := time.Now()
	msgs = msgs[:0]
	for _, r := range batch {
		if len(r.key)+len(r.value)+recordOverhead > p.cfg.BatchBytes {
			p.release(1)
			p.sendFailed(1, errTooLarge)
			continue
		}
		msgs = append(msgs, kafka.Message{Key: r.key, Value: r.value, Time: now})
	}
	if len(msgs) == 0 {
		return msgs
	}
	ctx, cancel := context.WithTimeout(p.abortCtx, p.cfg.WriteTimeout)
	// In async mode this only looks up the partition count (cached by the
	// transport); errors here mean no message reached the writer, so no
	// Completion will come for them.
	err := p.writer.WriteMessages(ctx, msgs...)
	cancel()
	if err != nil {
		p.release(len(msgs))
		if p.abortCtx.Err() != nil {
			p.dropClosed(len(msgs))
		} else {
			p.sendFailed(len(msgs), err)
		}
	}
	clear(msgs) // drop references to the events' bytes
	return msgs
}

// completion is the writer's callback, once per batch.
func (p *Producer) completion(msgs []kafka.Message, err error) {
	if err == nil {
		p.metrics.published.Add(float64(len(msgs)))
	} else {
		p.sendFailed(len(msgs), err)
	}
	p.release(len(msgs))
}

func (p *Producer) sendFailed(n int, err error) {
	p.failed.Add(int64(n))
	p.metrics.droppedSendFailed.Add(float64(n))
	p.warn.warn(ErrorClass(err), "kafka publish failed", zap.Int("events", n), zap.Error(err))
}

func (p *Producer) dropClosed(n int) {
	p.abandoned.Add(int64(n))
	p.metrics.droppedClosed.Add(float64(n))
}

// abandonQueue drops what is left in the (closed) queue after Close gave up.
func (p *Producer) abandonQueue() {
	n := 0
	for range p.queue {
		n++
	}
	p.dropClosed(n)
}

// queueLength is queued + waiting for room + in flight.
func (p *Producer) queueLength() float64 {
	return float64(int64(len(p.queue)) + p.holding.Load() + p.inflight.Load())
}
