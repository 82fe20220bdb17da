package kafkabus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ratewarden/ratewarden/internal/event"

	"github.com/segmentio/kafka-go"
	"go.uber.org/zap"
)

// Fetch settings of the consumer's Reader. kafka-go gives a fetch a read
// deadline of MaxWait and asks the broker to hold a fetch that finds no data
// for MaxWait less a margin of min(MaxWait/4, 1s): the margin is all the time
// the broker has to answer late. A fetch cut off by its deadline is an
// unknown error to kafka-go: a warning, the connection closed, a backoff, a
// new dial, and the same fetch asked again.
const (
	// fetchMaxWait leaves a margin of a full second and lets the broker hold
	// an empty fetch for 500ms (a shutdown or a rebalance waits for the fetch
	// in flight). 250ms left 62ms, which a busy machine or a GC pause overran.
	fetchMaxWait = 1500 * time.Millisecond
	// fetchMaxBytes bounds the answer to one fetch, and with it the time the
	// broker takes to build it. With 16 MB a backlog came back in one answer
	// that could take the broker longer than the deadline; as every retry
	// asked for the same answer, the consumer made no progress for as long
	// as the machine stayed that slow.
	fetchMaxBytes = 1 << 20
)

// ConsumerConfig configures Consume.
type ConsumerConfig struct {
	Brokers []string
	Topic   string
	GroupID string
	// BatchSize caps the messages handed to the handler at once (default
	// 500); BatchWait is how long a batch waits to fill once it has its
	// first message (default 20ms).
	BatchSize int
	BatchWait time.Duration
	// Buffer bounds the messages fetched ahead while a batch is handled
	// (default 10 000); when it is full, fetching stops: nothing is dropped.
	Buffer int
	// SessionTimeout decides how long a dead member holds its partitions
	// (default 10s).
	SessionTimeout time.Duration
	// OnStats, if set, is told after each batch the consumer lag and how
	// many messages wait in the fetch-ahead buffer.
	OnStats func(lag, buffered int64)
}

// Consume reads topic in consumer group GroupID until ctx ends: it fetches a
// batch, hands it to handle and commits its offsets only once handle has
// succeeded. A failing handle is retried with capped backoff while the
// offsets are held, so nothing is skipped; delivery is at least once and
// handle must be idempotent. The slice handle is given is reused for the
// next batch: handle must not keep it once it returns.
func Consume(ctx context.Context, cfg ConsumerConfig, log *zap.Logger, handle func(context.Context, []event.Message) error) error {
	if len(cfg.Brokers) == 0 || cfg.Topic == "" || cfg.GroupID == "" {
		return errors.New("consume: brokers, topic and group id are required")
	}
	cfg = cfg.withDefaults()
	throttled := newThrottledLog(log, 10*time.Second)
	rebalance := newRebalanceLog(log, throttled)
	r := newReader(cfg, log, throttled, rebalance)
	defer r.Close()
	batch := make([]kafka.Message, 0, cfg.BatchSize)
	msgs := make([]event.Message, 0, cfg.BatchSize)
	for rejoins := 0; ; {
		var err error
		if batch, err = fetchBatch(ctx, r, cfg, batch[:0]); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if !temporary(err) {
				return fmt.Errorf("consume %s: %w", cfg.Topic, err)
			}
			// A rebalance under way (several readers of one group joining
			// at once) and the like: the reader rejoins by itself.
			wait := min(50*time.Millisecond<<min(rejoins, 6), 2*time.Second)
			rejoins++
			if rebalancing(err) {
				rebalance.note("fetch met a rebalance, rejoining", zap.String("topic", cfg.Topic), zap.Duration("in", wait), zap.Error(err))
			} else {
				log.Warn("fetch failed, retrying", zap.String("topic", cfg.Topic), zap.Duration("in", wait), zap.Error(err))
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(wait):
			}
			continue
		}
		rejoins = 0
		msgs = messagesOf(batch, msgs[:0])
		for attempt := 0; ; attempt++ {
			if err = handle(ctx, msgs); err == nil {
				break
			}
			if ctx.Err() != nil {
				return nil // offsets not committed: the batch is delivered again
			}
			wait := min(100*time.Millisecond<<min(attempt, 6), 5*time.Second)
			log.Warn("batch failed, retrying with offsets held", zap.Int("messages", len(batch)), zap.Duration("in", wait), zap.Error(err))
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(wait):
			}
		}
		if err := r.CommitMessages(context.WithoutCancel(ctx), batch...); err != nil {
			// The batch is handled; a failed commit only means it may be
			// delivered again, which handlers tolerate.
			log.Warn("offset commit failed", zap.Error(err))
		}
		if cfg.OnStats != nil {
			st := r.Stats()
			cfg.OnStats(st.Lag, st.QueueLength)
		}
	}
}

// withDefaults returns cfg with its zero values replaced by the defaults.
func (cfg ConsumerConfig) withDefaults() ConsumerConfig {
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 500
	}
	if cfg.BatchWait <= 0 {
		cfg.BatchWait = 20 * time.Millisecond
	}
	if cfg.Buffer <= 0 {
		cfg.Buffer = 10000
	}
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = 10 * time.Second
	}
	return cfg
}

// newReader returns the group reader of cfg (with its defaults applied).
func newReader(cfg ConsumerConfig, log *zap.Logger, throttled *throttledLog, rebalance *rebalanceLog) *kafka.Reader {
	debugLog, errorLog := kafkaLoggers(log, throttled, rebalance)
	return kafka.NewReader(kafka.ReaderConfig{
		Brokers:           cfg.Brokers,
		GroupID:           cfg.GroupID,
		Topic:             cfg.Topic,
		QueueCapacity:     cfg.Buffer,
		MinBytes:          1,
		MaxBytes:          fetchMaxBytes,
		MaxWait:           fetchMaxWait,
		StartOffset:       kafka.FirstOffset,
		SessionTimeout:    cfg.SessionTimeout,
		HeartbeatInterval: cfg.SessionTimeout / 5,
		Logger:            debugLog,
		ErrorLogger:       errorLog,
	})
}

// temporary reports whether a fetch error is one the group reader recovers
// from by itself, rejoining: a rebalance under way or a membership it must
// renew (kafka-go returns them once it gave up a join, then tries again),
// or one the broker calls retriable (kafka.Error's Temporary).
func temporary(err error) bool {
	if rebalancing(err) {
		return true
	}
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

// messagesOf appends to out what the handler sees of each message of batch.
// The values are shared, not copied.
func messagesOf(batch []kafka.Message, out []event.Message) []event.Message {
	for i := range batch {
		m := &batch[i]
		out = append(out, event.Message{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Time: m.Time, Value: m.Value})
	}
	return out
}

// fetchBatch blocks for one message, then takes what arrives within
// BatchWait, up to BatchSize.
func fetchBatch(ctx context.Context, r *kafka.Reader, cfg ConsumerConfig, batch []kafka.Message) ([]kafka.Message, error) {
	m, err := r.FetchMessage(ctx)
	if err != nil {
		return batch, err
	}
	batch = append(batch, m)
	fill, cancel := context.WithTimeout(ctx, cfg.BatchWait)
	defer cancel()
	for len(batch) < cfg.BatchSize {
		m, err := r.FetchMessage(fill)
		if err != nil {
			break
		}
		batch = append(batch, m)
	}
	return batch, nil
}
