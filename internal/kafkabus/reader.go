package kafkabus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/event"
)

// GroupReader reads one topic in a consumer group message by message and
// commits the offsets its user chooses, for a consumer whose batches are
// not Consume's (the notifier closes its digests by the messages'
// timestamps, not by their arrival). Fetch ahead is bounded by
// ConsumerConfig.Buffer; nothing is committed but what Commit is given.
type GroupReader struct {
	r         *kafka.Reader
	log       *zap.Logger
	rebalance *rebalanceLog
}

// NewGroupReader returns a reader of cfg.Topic in group cfg.GroupID, from
// the group's committed offsets (the first offset of a partition the group
// never committed). BatchSize, BatchWait and OnStats are not used.
func NewGroupReader(cfg ConsumerConfig, log *zap.Logger) (*GroupReader, error) {
	if len(cfg.Brokers) == 0 || cfg.Topic == "" || cfg.GroupID == "" {
		return nil, errors.New("group reader: brokers, topic and group id are required")
	}
	cfg = cfg.withDefaults()
	throttled := newThrottledLog(log, 10*time.Second)
	rebalance := newRebalanceLog(log, throttled)
	return &GroupReader{r: newReader(cfg, log, throttled, rebalance), log: log, rebalance: rebalance}, nil
}

// Fetch returns the next message and the high-water mark of its
// partition as the fetch that brought it saw it (the offset the next
// message will have: the reader has caught up with the partition when the
// message's Offset+1 reaches it). A rebalance or another error the reader
// recovers from is waited out with capped backoff; it returns an error
// only when ctx ends (ctx's error) or the reader fails for good.
func (g *GroupReader) Fetch(ctx context.Context) (event.Message, int64, error) {
	for attempt := 0; ; attempt++ {
		m, err := g.r.FetchMessage(ctx)
		if err == nil {
			return event.Message{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Time: m.Time, Value: m.Value}, m.HighWaterMark, nil
		}
		if ctx.Err() != nil {
			return event.Message{}, 0, ctx.Err()
		}
		if !temporary(err) {
			return event.Message{}, 0, fmt.Errorf("fetch %s: %w", g.r.Config().Topic, err)
		}
		wait := min(50*time.Millisecond<<min(attempt, 6), 2*time.Second)
		if rebalancing(err) {
			g.rebalance.note("fetch met a rebalance, rejoining", zap.String("topic", g.r.Config().Topic), zap.Duration("in", wait), zap.Error(err))
		} else {
			g.log.Warn("fetch failed, retrying", zap.String("topic", g.r.Config().Topic), zap.Duration("in", wait), zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return event.Message{}, 0, ctx.Err()
		case <-time.After(wait):
		}
	}
}

// Commit commits the offsets of msgs: for each partition, everything up to
// the highest offset given is committed, so the caller gives only messages
// every earlier message of whose partition it is done with.
func (g *GroupReader) Commit(ctx context.Context, msgs []event.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	km := make([]kafka.Message, len(msgs))
	for i, m := range msgs {
		km[i] = kafka.Message{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset}
	}
	return g.r.CommitMessages(ctx, km...)
}

// Lag is the reader's lag behind the end of the partition it last fetched
// from, as kafka-go reports it.
func (g *GroupReader) Lag() int64 { return g.r.Stats().Lag }

// Close leaves the group and closes the reader's connections.
func (g *GroupReader) Close() error { return g.r.Close() }
