package kafkabus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/ratewarden/ratewarden/internal/event"
)

// BanPublisher writes ban, unban and warning messages synchronously: bans are
// rare and each must be acknowledged by the broker before the caller moves
// on (enforces the ban, commits its input offsets), so none is lost.
type BanPublisher struct {
	writer    *kafka.Writer
	transport *kafka.Transport
}

// NewBanPublisher returns a publisher on topic; messages are keyed
// scope:subject (deploy/schemas/ban.schema.json), so one offender's history
// stays in order.
func NewBanPublisher(brokers []string, topic string) (*BanPublisher, error) {
	if len(brokers) == 0 || topic == "" {
		return nil, errors.New("ban publisher: brokers and topic are required")
	}
	// A transport of its own: kafka-go's default one is shared by every
	// writer of the process and caches each broker address's metadata, so
	// a broker that comes back on an address (a restart, or in tests a
	// port reused) would be taken for the old one, its topics unknown.
	transport := &kafka.Transport{DialTimeout: 5 * time.Second}
	return &BanPublisher{transport: transport, writer: &kafka.Writer{
		Addr:         kafka.TCP(brokers...),
		Topic:        topic,
		Transport:    transport,
		Balancer:     kafka.Murmur2Balancer{},
		BatchTimeout: 2 * time.Millisecond, // a synchronous write waits this long for company
		RequiredAcks: kafka.RequireAll,
		MaxAttempts:  5,
		WriteTimeout: 5 * time.Second,
	}}, nil
}

// Publish writes bans and returns once the broker has acknowledged them.
func (p *BanPublisher) Publish(ctx context.Context, bans ...event.Ban) error {
	msgs := make([]kafka.Message, 0, len(bans))
	for _, b := range bans {
		v, err := event.EncodeBan(b)
		if err != nil {
			return fmt.Errorf("publish ban %s: %w", b.BanID, err)
		}
		msgs = append(msgs, kafka.Message{Key: []byte(b.Key()), Value: v})
	}
	if err := p.writer.WriteMessages(ctx, msgs...); err != nil {
		return fmt.Errorf("publish %d ban messages to %s: %w", len(msgs), p.writer.Topic, err)
	}
	return nil
}

// Close flushes and closes the writer and its connections.
func (p *BanPublisher) Close() error {
	err := p.writer.Close()
	p.transport.CloseIdleConnections()
	return err
}
