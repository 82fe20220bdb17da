package archiver

import (
	"context"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/ratewarden/ratewarden/internal/kafkabus"
)

// consume runs the archiver's consumers until ctx ends; one that fails for
// good stops them all, and so the process (it would otherwise stall
// silently).
//
// Several consumers of the decisions topic in one group split its
// partitions, so decoding one batch overlaps writing another; as many for
// the outcomes topic, every message of which is a row.
func (a *App) consume(ctx context.Context) error {
	cfg := a.cfg
	topics := []string{cfg.BansTopic}
	for range cfg.Consumers {
		topics = append(topics, cfg.DecisionsTopic, cfg.OutcomesTopic)
	}
	// Side by side: they stop together, each committing its batch.
	consumers, ctx := errgroup.WithContext(ctx)
	ready := a.awaitTopics(ctx, consumers, topics)
	for _, topic := range topics {
		consumers.Go(func() error {
			select {
			case <-ctx.Done():
				return nil
			case <-ready[topic]:
			}
			return kafkabus.Consume(ctx, kafkabus.ConsumerConfig{
				Brokers: cfg.KafkaBrokers, Topic: topic, GroupID: cfg.GroupID,
				BatchSize: cfg.BatchSize, BatchWait: cfg.FlushInterval, OnStats: a.svc.ReportStats(topic),
			}, a.log.Named("consumer").With(zap.String("topic", topic)), a.svc.Handle)
		})
	}
	return consumers.Wait()
}

// awaitTopics returns, for each distinct topic, a channel closed once the
// topic exists. A topic missing from the cluster would leave the whole
// group without partitions, so a topic's consumers join only once it
// exists (the outcomes topic may come after an upgrade).
func (a *App) awaitTopics(ctx context.Context, g *errgroup.Group, topics []string) map[string]chan struct{} {
	ready := map[string]chan struct{}{}
	for _, topic := range topics {
		if _, ok := ready[topic]; ok {
			continue
		}
		exists := make(chan struct{})
		ready[topic] = exists
		g.Go(func() error {
			if kafkabus.AwaitTopic(ctx, a.cfg.KafkaBrokers, topic, kafkabus.TopicPoll, a.log) {
				close(exists)
			}
			return nil
		})
	}
	return ready
}
