package kafkabus_test

import (
	"context"
	"testing"

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
