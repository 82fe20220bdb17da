package kafkatest_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/ratewarden/ratewarden/internal/kafkatest"
)

func write(t *testing.T, brokers []string, topic string, n int) {
	t.Helper()
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, Balancer: &kafka.Hash{}, BatchTimeout: time.Millisecond}
	defer w.Close()
	msgs := make([]kafka.Message, n)
	for i := range msgs {
		msgs[i] = kafka.Message{Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "v%d", i)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
}

func TestStartBrokerAndReadBack(t *testing.T) {
	b := kafkatest.StartBroker(t, "a", "b")
	if !strings.HasPrefix(b.Addr(), "127.0.0.1:") || len(b.Brokers()) != 1 || b.Brokers()[0] != b.Addr() {
		t.Fatalf("Addr %s, Brokers %v", b.Addr(), b.Brokers())
	}
	for _, topic := range []string{"a", "b"} {
		if got := len(kafkatest.Partitions(t, b.Brokers(), topic)); got != kafkatest.DefaultPartitions {
			t.Fatalf("%s has %d partitions", topic, got)
		}
	}
	write(t, b.Brokers(), "a", 50)
	msgs := kafkatest.ReadMessages(t, b.Brokers(), "a", 50, 10*time.Second)
	parts := map[int]bool{}
	for _, m := range msgs {
		if strings.TrimPrefix(string(m.Key), "k") != strings.TrimPrefix(string(m.Value), "v") {
			t.Fatalf("key %s with value %s", m.Key, m.Value)
		}
		parts[m.Partition] = true
	}
	if len(parts) < 2 {
		t.Fatalf("read from partitions %v only", parts)
	}
	if got := kafkatest.CountMessages(t, b.Brokers(), "a"); got != 50 {
		t.Fatalf("CountMessages = %d", got)
	}
	b.Stop()
	b.Stop()
}

// fatalTB records Fatalf instead of failing the real test.
type fatalTB struct {
	testing.TB
	mu  sync.Mutex
	msg string
}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.msg = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

func TestReadMessagesTimesOutWithCount(t *testing.T) {
	b := kafkatest.StartBroker(t, "a")
	write(t, b.Brokers(), "a", 2)
	ftb := &fatalTB{TB: t}
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		kafkatest.ReadMessages(ftb, b.Brokers(), "a", 5, 500*time.Millisecond)
	}()
	<-done
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Fatalf("ReadMessages took %s with a 500ms timeout", elapsed)
	}
	if !strings.Contains(ftb.msg, "2 of 5 messages arrived") {
		t.Fatalf("failure message %q", ftb.msg)
	}
}
