package main

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/kafkabus"
	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/kafkatest"
)

func testBrokerConfig() brokerConfig {
	return brokerConfig{
		ListenAddr: "127.0.0.1:0", DecisionsTopic: "d", BansTopic: "b", Partitions: 2,
		Retention: time.Hour, RetentionBytes: 256 << 20, CleanerInterval: 100 * time.Millisecond,
	}
}

func produce(t *testing.T, brokers []string, topic string, n, size int) {
	t.Helper()
	p, err := kafkabus.NewProducer(kafkabus.ProducerConfig{Brokers: brokers, Topic: topic, BatchSize: 1}, zap.NewNop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		value := fmt.Appendf(nil, "%0*d", size, i)
		p.Publish(fmt.Appendf(nil, "k%d", i), value)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestRetentionByTime(t *testing.T) {
	cfg := testBrokerConfig()
	cfg.Retention = 300 * time.Millisecond
	b, err := startBroker(cfg, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Stop()
	produce(t, []string{b.Addr()}, "d", 20, 10)
	testkit.WaitFor(t, 5*time.Second, "all expired", func() bool {
		return kafkatest.CountMessages(t, []string{b.Addr()}, "d") == 0
	})
}

func TestRetentionBySize(t *testing.T) {
	cfg := testBrokerConfig()
	cfg.Partitions = 1
	cfg.RetentionBytes = 4096
	b, err := startBroker(cfg, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Stop()
	produce(t, []string{b.Addr()}, "d", 200, 100) // ~30 KiB in one partition
	testkit.WaitFor(t, 5*time.Second, "trimmed to retention.bytes", func() bool {
		info := b.cluster.PartitionInfo("d", 0)
		return info != nil && info.NumBytes <= cfg.RetentionBytes && info.LogStartOffset > 0
	})
	if n := kafkatest.CountMessages(t, []string{b.Addr()}, "d"); n == 0 || n >= 200 {
		t.Fatalf("%d messages kept, want some but not all", n)
	}
}

func TestDataDirSurvivesRestart(t *testing.T) {
	cfg := testBrokerConfig()
	cfg.DataDir = t.TempDir()
	b, err := startBroker(cfg, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	produce(t, []string{b.Addr()}, "b", 5, 10)
	b.Stop()
	b.Stop() // idempotent

	b, err = startBroker(cfg, zap.NewNop())
	if err != nil {
		t.Fatalf("restart on the same data dir: %v", err)
	}
	defer b.Stop()
	if got := len(kafkatest.Partitions(t, []string{b.Addr()}, "b")); got != cfg.Partitions {
		t.Fatalf("%d partitions after restart", got)
	}
	kafkatest.ReadMessages(t, []string{b.Addr()}, "b", 5, 10*time.Second)
}

func TestAdvertisedAddress(t *testing.T) {
	cfg := testBrokerConfig()
	cfg.AdvertisedAddr = "127.0.0.1:0" // goes through our own listener
	b, err := startBroker(cfg, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Stop()
	if b.Addr() != b.ListenAddr() {
		t.Fatalf("advertised %s, listening on %s", b.Addr(), b.ListenAddr())
	}
	produce(t, []string{b.Addr()}, "d", 3, 10)
	kafkatest.ReadMessages(t, []string{b.Addr()}, "d", 3, 10*time.Second)
}

func TestAdvertise(t *testing.T) {
	real := &net.TCPAddr{IP: net.IPv4zero, Port: 9092}
	for _, tc := range []struct{ adv, want string }{
		{"", "127.0.0.1:9092"},
		{"devkafka:9092", "devkafka:9092"},
		{"devkafka:0", "devkafka:9092"},
	} {
		if got := advertise(tc.adv, real); got != tc.want {
			t.Errorf("advertise(%q) = %s, want %s", tc.adv, got, tc.want)
		}
	}
	if got := advertise("", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}); got != "127.0.0.1:1" {
		t.Errorf("advertise loopback = %s", got)
	}
}
