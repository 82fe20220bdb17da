package kafkabus_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/kafkabus"
	"github.com/ratewarden/ratewarden/internal/testkit/kafkatest"
)

// Three readers of one group, one per topic, started together as the
// archiver starts them: the group rebalances as each joins, and none of
// that is a warning. Each reader gets a message of its topic, so all three
// have joined when the warnings are counted.
func TestJoiningReadersLogNoWarning(t *testing.T) {
	topics := []string{"join.a", "join.b", "join.c"}
	b := kafkatest.StartBroker(t, topics...)
	core, logs := observer.New(zapcore.WarnLevel)
	log := zap.New(core)
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan string, 100)
	done := make(chan error, len(topics))
	for _, tp := range topics {
		go func() {
			done <- kafkabus.Consume(ctx, kafkabus.ConsumerConfig{Brokers: b.Brokers(), Topic: tp, GroupID: "joiners"}, log,
				func(_ context.Context, msgs []event.Message) error {
					for range msgs {
						got <- tp
					}
					return nil
				})
		}()
	}
	t.Cleanup(func() {
		cancel()
		for range topics {
			<-done
		}
	})
	for _, tp := range topics {
		p, _ := newProducer(t, kafkabus.ProducerConfig{Brokers: b.Brokers(), Topic: tp}, zap.NewNop())
		p.Publish([]byte("k"), []byte("v"))
		cctx, ccancel := context.WithTimeout(context.Background(), 20*time.Second)
		if err := p.Close(cctx); err != nil {
			t.Fatal(err)
		}
		ccancel()
	}
	seen := map[string]bool{}
	for timeout := time.After(time.Minute); len(seen) < len(topics); {
		select {
		case tp := <-got:
			seen[tp] = true
		case <-timeout:
			t.Fatalf("after a minute, messages of %v only", seen)
		}
	}
	for _, e := range logs.All() {
		t.Errorf("warning while the readers joined: %s %v", e.Message, e.ContextMap())
	}
}
