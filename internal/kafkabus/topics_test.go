package kafkabus_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/ratewarden/ratewarden/internal/kafkabus"
	"github.com/ratewarden/ratewarden/internal/testkit/kafkatest"
)

func TestTopicExists(t *testing.T) {
	ctx := context.Background()
	b := kafkatest.StartBroker(t, "present")
	for _, tc := range []struct {
		topic string
		want  bool
	}{{"present", true}, {"absent", false}} {
		got, err := kafkabus.TopicExists(ctx, b.Brokers(), tc.topic)
		if err != nil || got != tc.want {
			t.Errorf("TopicExists(%s) = %v, %v; want %v", tc.topic, got, err, tc.want)
		}
	}
	// Asking did not create it.
	if got, err := kafkabus.TopicExists(ctx, b.Brokers(), "absent"); err != nil || got {
		t.Errorf("TopicExists(absent) the second time = %v, %v; want false", got, err)
	}
	b.Stop()
	if _, err := kafkabus.TopicExists(ctx, b.Brokers(), "present"); err == nil {
		t.Error("TopicExists on a stopped broker: no error")
	}
}

// AwaitTopic warns, naming the topic, while it is missing, returns once it
// is created (saying so), and returns false when its context ends first.
func TestAwaitTopic(t *testing.T) {
	broker := kafkatest.StartBroker(t, "present")
	core, logs := observer.New(zap.InfoLevel)
	found := make(chan bool, 1)
	go func() {
		found <- kafkabus.AwaitTopic(context.Background(), broker.Brokers(), "late", 20*time.Millisecond, zap.New(core))
	}()
	deadline := time.Now().Add(10 * time.Second)
	for logs.FilterMessageSnippet("does not exist").FilterField(zap.String("topic", "late")).Len() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no warning naming the missing topic: %v", logs.All())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if w := logs.FilterMessageSnippet("does not exist").All()[0]; w.Level != zap.WarnLevel {
		t.Errorf("logged at %v, want warn", w.Level)
	}
	select {
	case <-found:
		t.Fatal("AwaitTopic returned before the topic existed")
	default:
	}
	if err := broker.Cluster().CreateTopic("late", 1, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case ok := <-found:
		if !ok {
			t.Fatal("AwaitTopic = false, want true")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("AwaitTopic did not see the new topic")
	}
	if logs.FilterMessageSnippet("exists now").FilterField(zap.String("topic", "late")).Len() != 1 {
		t.Errorf("no line saying the topic appeared: %v", logs.All())
	}

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if kafkabus.AwaitTopic(ctx, broker.Brokers(), "never", 20*time.Millisecond, zap.NewNop()) {
		t.Fatal("AwaitTopic = true for a topic that never came")
	}
	if !kafkabus.AwaitTopic(context.Background(), broker.Brokers(), "present", 20*time.Millisecond, zap.New(core)) ||
		logs.FilterField(zap.String("topic", "present")).Len() != 0 {
		t.Errorf("a topic that exists: logged %v", logs.FilterField(zap.String("topic", "present")).All())
	}
}
