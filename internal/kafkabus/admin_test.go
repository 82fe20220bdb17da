package kafkabus_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/ratewarden/ratewarden/internal/kafkabus"
	"github.com/ratewarden/ratewarden/internal/testkit/kafkatest"
)

func TestPing(t *testing.T) {
	b := kafkatest.StartBroker(t)
	if err := kafkabus.Ping(context.Background(), b.Brokers()); err != nil {
		t.Fatalf("Ping of a running broker: %v", err)
	}
	// One dead address before a live one is fine.
	if err := kafkabus.Ping(context.Background(), []string{"127.0.0.1:1", b.Addr()}); err != nil {
		t.Fatalf("Ping with one live broker: %v", err)
	}
	b.Stop()
	start := time.Now()
	err := kafkabus.Ping(context.Background(), b.Brokers())
	if err == nil || !strings.Contains(err.Error(), b.Addr()) {
		t.Fatalf("Ping of a stopped broker: %v, want an error naming %s", err, b.Addr())
	}
	if elapsed := time.Since(start); elapsed > kafkabus.PingTimeout+time.Second {
		t.Fatalf("Ping took %s", elapsed)
	}
	if err := kafkabus.Ping(context.Background(), nil); err == nil {
		t.Fatal("Ping without brokers succeeded")
	}
}

func TestErrorClass(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, "none"},
		{kafka.UnknownTopicOrPartition, "kafka_unknown_topic_or_partition"},
		{fmt.Errorf("produce: %w", kafka.RequestTimedOut), "kafka_request_timed_out"},
		{context.DeadlineExceeded, "timeout"},
		{fmt.Errorf("dial: %w", syscall.ECONNREFUSED), "connection_refused"},
		{io.ErrUnexpectedEOF, "connection_lost"},
		{io.ErrClosedPipe, "writer_closed"},
		{errors.New("boom"), "other"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			if got := kafkabus.ErrorClass(tc.err); got != tc.want {
				t.Fatalf("ErrorClass(%v) = %q, want %q", tc.err, got, tc.want)
			}
		})
	}
}
