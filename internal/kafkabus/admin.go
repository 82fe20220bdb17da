package kafkabus

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
)

// PingTimeout bounds Ping when ctx has no earlier deadline.
const PingTimeout = 2 * time.Second

// Ping reports whether one of brokers answers the Kafka protocol (a TCP dial
// and an ApiVersions request), for /readyz. The error names the addresses.
func Ping(ctx context.Context, brokers []string) error {
	if len(brokers) == 0 {
		return errors.New("ping kafka: no brokers")
	}
	ctx, cancel := context.WithTimeout(ctx, PingTimeout)
	defer cancel()
	var errs []error
	for _, addr := range brokers {
		err := pingOne(ctx, addr)
		if err == nil {
			return nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", addr, err))
	}
	return fmt.Errorf("ping kafka brokers %s: %w", strings.Join(brokers, ","), errors.Join(errs...))
}

func pingOne(ctx context.Context, addr string) error {
	conn, err := (&kafka.Dialer{ClientID: DefaultClientID}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		if err := conn.SetDeadline(deadline); err != nil {
			return err
		}
	}
	_, err = conn.ApiVersions()
	return err
}

// TopicSpec describes a topic for EnsureTopics.
type TopicSpec struct {
	Name string
	// Partitions; zero or less takes the broker's default.
	Partitions int
	// ReplicationFactor; zero or less takes the broker's default.
	ReplicationFactor int
	// Configs are topic configs such as retention.ms.
	Configs map[string]string
}

// EnsureTopics creates the topics that do not exist yet. Existing topics are
// left as they are (partitions and configs are not changed) and are not an
// error. kafka.Client finds the controller itself.
func EnsureTopics(ctx context.Context, brokers []string, topics ...TopicSpec) error {
	if len(brokers) == 0 {
		return errors.New("ensure kafka topics: no brokers")
	}
	if len(topics) == 0 {
		return nil
	}
	req := &kafka.CreateTopicsRequest{}
	for _, t := range topics {
		if t.Name == "" {
			return errors.New("ensure kafka topics: a topic has no name")
		}
		tc := kafka.TopicConfig{Topic: t.Name, NumPartitions: -1, ReplicationFactor: -1}
		if t.Partitions > 0 {
			tc.NumPartitions = t.Partitions
		}
		if t.ReplicationFactor > 0 {
			tc.ReplicationFactor = t.ReplicationFactor
		}
		keys := make([]string, 0, len(t.Configs))
		for k := range t.Configs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			tc.ConfigEntries = append(tc.ConfigEntries, kafka.ConfigEntry{ConfigName: k, ConfigValue: t.Configs[k]})
		}
		req.Topics = append(req.Topics, tc)
	}
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second}
	resp, err := client.CreateTopics(ctx, req)
	if err != nil {
		return fmt.Errorf("ensure kafka topics at %s: %w", strings.Join(brokers, ","), err)
	}
	var errs []error
	for _, t := range topics {
		if err := resp.Errors[t.Name]; err != nil && !errors.Is(err, kafka.TopicAlreadyExists) {
			errs = append(errs, fmt.Errorf("topic %q: %w", t.Name, err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("ensure kafka topics: %w", errors.Join(errs...))
	}
	return nil
}
