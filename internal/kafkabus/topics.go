package kafkabus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
	"go.uber.org/zap"
)

// TopicExists reports whether topic exists on the cluster of brokers. It
// asks for the topic's metadata without asking the broker to create it.
//
// A consumer group whose members subscribe to a topic that does not exist
// gets no partitions of any topic: kafka-go's group leader reads the
// partitions of every subscribed topic at once, and one unknown topic
// leaves the whole assignment empty. Consumers wait for their topic with
// AwaitTopic first.
func TopicExists(ctx context.Context, brokers []string, topic string) (bool, error) {
	if len(brokers) == 0 {
		return false, errors.New("topic metadata: no brokers")
	}
	// A transport of its own: kafka-go's default one caches metadata, and
	// would answer "absent" after the topic was created.
	transport := &kafka.Transport{ClientID: defaultClientID}
	defer transport.CloseIdleConnections()
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Transport: transport}
	md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return false, fmt.Errorf("metadata of topic %s from %s: %w", topic, strings.Join(brokers, ","), err)
	}
	for _, t := range md.Topics {
		if t.Name != topic {
			continue
		}
		switch {
		case errors.Is(t.Error, kafka.UnknownTopicOrPartition):
			return false, nil
		case t.Error != nil:
			return false, fmt.Errorf("metadata of topic %s: %w", topic, t.Error)
		}
		return len(t.Partitions) > 0, nil
	}
	return false, nil
}

// TopicPoll is how often a consumer looks again for a topic missing at
// start (AwaitTopic's poll).
const TopicPoll = 10 * time.Second

// topicRemind is how often AwaitTopic warns again while a topic is missing,
// so that a recent slice of the log still says why nothing is consumed.
const topicRemind = time.Minute

// AwaitTopic returns true once topic exists, looking every poll, or false
// when ctx ends first. While the topic is missing it warns, naming it, at
// once and every minute; it says so at info when the topic appears. A
// consumer waits with it before joining its group: a group reader of a
// missing topic gets no partitions and, once they exist, none until the
// group rebalances for another reason, so it would wait silently for ever.
func AwaitTopic(ctx context.Context, brokers []string, topic string, poll time.Duration, log *zap.Logger) bool {
	var warned time.Time
	for {
		askCtx, cancel := context.WithTimeout(ctx, poll)
		exists, err := TopicExists(askCtx, brokers, topic)
		cancel()
		if exists {
			if !warned.IsZero() {
				log.Info("topic exists now, consuming it", zap.String("topic", topic))
			}
			return true
		}
		if ctx.Err() == nil && (warned.IsZero() || time.Since(warned) >= topicRemind) {
			log.Warn("topic does not exist; waiting for it to be created", zap.String("topic", topic),
				zap.Duration("retry", poll), zap.Error(err))
			warned = time.Now()
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(poll):
		}
	}
}
