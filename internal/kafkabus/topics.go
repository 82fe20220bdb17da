package kafkabus

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/segmentio/kafka-go"
)

// TopicExists reports whether topic exists on the cluster of brokers. It
// asks for the topic's metadata without asking the broker to create it.
//
// A consumer group whose members subscribe to a topic that does not exist
// gets no partitions of any topic: kafka-go's group leader reads the
// partitions of every subscribed topic at once, and one unknown topic
// leaves the whole assignment empty. Consumers sharing a group wait for
// their topic with this first.
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
