package kafkabus_test

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/event"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/ratewarden/ratewarden/internal/kafkabus"
	"github.com/ratewarden/ratewarden/internal/testkit/kafkatest"
)

// slowFetch is how late the broker takes up each fetch in
// TestConsumeFromABrokerThatAnswersLate: more than the whole read deadline
// the consumer once gave a fetch (250ms), and about what the embedded
// broker took to answer a fetch of a 20 000-message backlog on a busy
// machine.
const slowFetch = 300 * time.Millisecond

// handled records the messages Consume handed to its handler, by partition
// and offset: delivery is at least once, so one may come twice.
type handled struct {
	mu   sync.Mutex
	seen map[[2]int64]bool
}

func (h *handled) handle(_ context.Context, msgs []event.Message) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, m := range msgs {
		h.seen[[2]int64{int64(m.Partition), m.Offset}] = true
	}
	return nil
}

func (h *handled) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.seen)
}

// startConsume runs Consume on topic in group "g" until the test ends, and
// checks then that it returns nil once its context is cancelled.
func startConsume(t *testing.T, brokers []string, log *zap.Logger) *handled {
	t.Helper()
	h := &handled{seen: map[[2]int64]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- kafkabus.Consume(ctx, kafkabus.ConsumerConfig{Brokers: brokers, Topic: topic, GroupID: "g", BatchSize: 100}, log, h.handle)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Consume returned %v after its context ended, want nil", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("Consume still running 30s after its context ended")
		}
	})
	return h
}

// publish writes n messages with keys from first on, spread over the
// partitions, and waits until the broker has them.
func publish(t *testing.T, b *kafkatest.Broker, first, n int) {
	t.Helper()
	p, _ := newProducer(t, kafkabus.ProducerConfig{Brokers: b.Brokers(), Topic: topic}, zap.NewNop())
	for i := first; i < first+n; i++ {
		if !p.Publish(fmt.Appendf(nil, "k%d", i), fmt.Appendf(nil, "v%d", i)) {
			t.Fatalf("publish %d dropped", i)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// waitHandled waits until h holds n distinct messages.
func waitHandled(t *testing.T, h *handled, n int, timeout time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(timeout); h.count() < n; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d messages handled after %v", h.count(), n, timeout)
		}
	}
}

// A broker that takes up every fetch late, as a busy one does: the consumer
// still gets the backlog, then the messages that arrive while it waits for
// more, and commits them all. A consumer whose fetch deadline leaves the
// broker less time than that cuts every fetch off and gets nothing.
func TestConsumeFromABrokerThatAnswersLate(t *testing.T) {
	b := kafkatest.StartBroker(t, topic)
	publish(t, b, 0, 500)
	b.DelayFetches(slowFetch)
	core, warnings := observer.New(zapcore.WarnLevel)
	h := startConsume(t, b.Brokers(), zap.New(core))

	waitHandled(t, h, 500, time.Minute)
	publish(t, b, 500, 500)
	waitHandled(t, h, 1000, time.Minute)

	ends := kafkatest.EndOffsets(t, b.Brokers(), topic)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		committed := kafkatest.CommittedOffsets(t, b.Brokers(), "g", topic)
		if maps.Equal(committed, ends) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("committed offsets %v, want the end offsets %v", committed, ends)
		}
	}
	// Informational: how many fetches, if any, this machine still cut off.
	t.Logf("%d warnings logged", warnings.Len())
}
