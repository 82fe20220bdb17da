package kafkabus

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Defaults of ProducerConfig, applied to zero values.
const (
	defaultQueueSize    = 10000
	defaultMaxInFlight  = 10000
	defaultBatchSize    = 500
	defaultBatchTimeout = 5 * time.Millisecond
	defaultWriteTimeout = 10 * time.Second
	defaultMaxAttempts  = 10
	defaultBatchBytes   = 1 << 20
	defaultClientID     = "ratewarden"
)

// ProducerConfig configures a Producer. Zero values take the defaults above.
type ProducerConfig struct {
	// Brokers are the bootstrap addresses (host:port); at least one.
	Brokers []string
	// Topic is the one topic the producer writes to.
	Topic string
	// QueueSize bounds the events waiting to be handed to the Kafka writer;
	// Publish drops when it is full.
	QueueSize int
	// MaxInFlight bounds the events handed to the writer and not yet
	// acknowledged or failed; kafka-go's async writer would otherwise buffer
	// without bound while the broker is down.
	MaxInFlight int
	// BatchSize is the most messages per produce request and partition.
	BatchSize int
	// BatchTimeout is how long a partial batch waits before it is sent.
	BatchTimeout time.Duration
	// WriteTimeout bounds one produce request (and one metadata lookup).
	WriteTimeout time.Duration
	// MaxAttempts is how often a batch is tried before its events count as
	// send_failed.
	MaxAttempts int
	// BatchBytes bounds one produce request; larger events are dropped as
	// send_failed.
	BatchBytes int
	// ClientID is the Kafka client id.
	ClientID string
}

func (c ProducerConfig) withDefaults() (ProducerConfig, error) {
	var errs []error
	if len(c.Brokers) == 0 {
		errs = append(errs, errors.New("no brokers"))
	}
	for _, b := range c.Brokers {
		if strings.TrimSpace(b) == "" {
			errs = append(errs, errors.New("empty broker address"))
			break
		}
	}
	if c.Topic == "" {
		errs = append(errs, errors.New("no topic"))
	}
	for _, f := range []struct {
		name  string
		value int64
	}{
		{"QueueSize", int64(c.QueueSize)}, {"MaxInFlight", int64(c.MaxInFlight)}, {"BatchSize", int64(c.BatchSize)},
		{"BatchTimeout", int64(c.BatchTimeout)}, {"WriteTimeout", int64(c.WriteTimeout)},
		{"MaxAttempts", int64(c.MaxAttempts)}, {"BatchBytes", int64(c.BatchBytes)},
	} {
		if f.value < 0 {
			errs = append(errs, fmt.Errorf("%s is negative", f.name))
		}
	}
	if len(errs) > 0 {
		return c, fmt.Errorf("kafka producer config: %w", errors.Join(errs...))
	}
	setDefault(&c.QueueSize, defaultQueueSize)
	setDefault(&c.MaxInFlight, defaultMaxInFlight)
	setDefault(&c.BatchSize, defaultBatchSize)
	setDefault(&c.BatchTimeout, defaultBatchTimeout)
	setDefault(&c.WriteTimeout, defaultWriteTimeout)
	setDefault(&c.MaxAttempts, defaultMaxAttempts)
	setDefault(&c.BatchBytes, defaultBatchBytes)
	setDefault(&c.ClientID, defaultClientID)
	// A batch larger than the in-flight bound could never be handed over.
	c.BatchSize = min(c.BatchSize, c.MaxInFlight)
	return c, nil
}

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}
