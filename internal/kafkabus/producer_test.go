package kafkabus_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/ratewarden/ratewarden/internal/kafkabus"
	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/kafkatest"
)

const topic = "ratelimit.decisions"

func newProducer(t *testing.T, cfg kafkabus.ProducerConfig, log *zap.Logger) (*kafkabus.Producer, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	p, err := kafkabus.NewProducer(cfg, log, reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_ = p.Close(ctx)
	})
	return p, reg
}

func TestProducerDeliversEverythingAndCloseFlushes(t *testing.T) {
	const n = 2000
	b := kafkatest.StartBroker(t, topic)
	p, reg := newProducer(t, kafkabus.ProducerConfig{Brokers: b.Brokers(), Topic: topic}, zap.NewNop())

	for i := range n {
		key := fmt.Appendf(nil, "10.0.%d.%d", i/256, i%256)
		value := fmt.Appendf(nil, `{"event_id":"e-%d","ip":%q}`, i, key)
		if !p.Publish(key, value) {
			t.Fatalf("publish %d dropped", i)
		}
	}
	// Close right away: everything queued must still be delivered.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := p.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}

	msgs := kafkatest.ReadMessages(t, b.Brokers(), topic, n, 20*time.Second)
	seen := make(map[string]bool, n)
	partitionOf := make(map[string]int)
	for _, m := range msgs {
		key := string(m.Key)
		if seen[key] {
			t.Fatalf("duplicate key %s", key)
		}
		seen[key] = true
		if want := fmt.Sprintf(`"ip":%q}`, key); !strings.HasSuffix(string(m.Value), want) {
			t.Fatalf("value %s does not belong to key %s", m.Value, key)
		}
		partitionOf[key] = m.Partition
	}
	if got := kafkatest.CountMessages(t, b.Brokers(), topic); got != n {
		t.Fatalf("topic holds %d messages, want exactly %d", got, n)
	}
	if got := testkit.MetricSum(t, reg, "rate_limit_events_published_total", map[string]string{"topic": topic}); got != n {
		t.Fatalf("published_total = %v, want %d", got, n)
	}
	if got := testkit.MetricSum(t, reg, "rate_limit_event_queue_length", map[string]string{"topic": topic}); got != 0 {
		t.Fatalf("queue_length = %v after Close, want 0", got)
	}
	used := map[int]bool{}
	for _, part := range partitionOf {
		used[part] = true
	}
	if len(used) != kafkatest.DefaultPartitions {
		t.Fatalf("keys spread over partitions %v, want all %d", used, kafkatest.DefaultPartitions)
	}
}

func TestProducerKeyPartitioningIsStable(t *testing.T) {
	b := kafkatest.StartBroker(t, topic)
	p, _ := newProducer(t, kafkabus.ProducerConfig{Brokers: b.Brokers(), Topic: topic}, zap.NewNop())
	for i := range 30 {
		p.Publish([]byte("203.0.113.7"), fmt.Appendf(nil, "%d", i))
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	msgs := kafkatest.ReadMessages(t, b.Brokers(), topic, 30, 10*time.Second)
	for i, m := range msgs {
		if m.Partition != msgs[0].Partition {
			t.Fatalf("same key on partitions %d and %d", msgs[0].Partition, m.Partition)
		}
		// One key, one partition: order is preserved.
		if string(m.Value) != fmt.Sprint(i) {
			t.Fatalf("message %d has value %s", i, m.Value)
		}
	}
}

func TestProducerBrokerDownNeverBlocks(t *testing.T) {
	b := kafkatest.StartBroker(t, topic)
	core, logs := observer.New(zapcore.WarnLevel)
	cfg := kafkabus.ProducerConfig{Brokers: b.Brokers(), Topic: topic, QueueSize: 1000, MaxInFlight: 1000, BatchSize: 100}
	reg := prometheus.NewRegistry()
	p, err := kafkabus.NewProducer(cfg, zap.New(core), reg)
	if err != nil {
		t.Fatal(err)
	}
	// Warm up so the writer holds connections and metadata, then lose the broker.
	for range 10 {
		p.Publish([]byte("k"), []byte("v"))
	}
	testkit.WaitFor(t, 5*time.Second, "the 10 warm-up events published", func() bool {
		return testkit.MetricSum(t, reg, "rate_limit_events_published_total", map[string]string{"topic": topic}) == 10
	})
	b.Stop()

	const n = 20000
	start := time.Now()
	accepted := 0
	for i := range n {
		if p.Publish([]byte("k"), fmt.Appendf(nil, "%d", i)) {
			accepted++
		}
	}
	if elapsed := time.Since(start); elapsed > 2*time.Second {
		t.Fatalf("%d Publish calls took %s with the broker down", n, elapsed)
	}
	queueFull := testkit.MetricSum(t, reg, "rate_limit_events_dropped_total", map[string]string{"topic": topic, "reason": "queue_full"})
	if queueFull == 0 || int(queueFull)+accepted != n {
		t.Fatalf("queue_full drops = %v, accepted = %d, want them to add up to %d with drops", queueFull, accepted, n)
	}
	bound := float64(cfg.QueueSize + cfg.MaxInFlight + cfg.BatchSize)
	for range 10 {
		if q := testkit.MetricSum(t, reg, "rate_limit_event_queue_length", map[string]string{"topic": topic}); q > bound || q <= 0 {
			t.Fatalf("queue_length = %v, want in (0, %v]", q, bound)
		}
		time.Sleep(20 * time.Millisecond)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start = time.Now()
	err = p.Close(ctx)
	if elapsed := time.Since(start); elapsed > 1500*time.Millisecond {
		t.Fatalf("Close took %s with a 500ms deadline", elapsed)
	}
	if err == nil || !strings.Contains(err.Error(), "not flushed") {
		t.Fatalf("Close error = %v, want one counting unflushed events", err)
	}
	t.Logf("Close: %v", err)
	if p.Publish([]byte("k"), []byte("late")) {
		t.Fatal("Publish after Close accepted an event")
	}
	closed := testkit.MetricSum(t, reg, "rate_limit_events_dropped_total", map[string]string{"topic": topic, "reason": "closed"})
	if closed < 1 {
		t.Fatalf("closed drops = %v, want >= 1", closed)
	}
	if warns := logs.Len(); warns > 20 {
		t.Fatalf("%d warn lines for one outage; want them throttled", warns)
	}
}

func TestProducerResumesWhenBrokerReturns(t *testing.T) {
	b := kafkatest.StartBroker(t, topic)
	cfg := kafkabus.ProducerConfig{
		Brokers: b.Brokers(), Topic: topic, QueueSize: 100, MaxInFlight: 100, BatchSize: 10,
		WriteTimeout: 500 * time.Millisecond, MaxAttempts: 2,
	}
	p, reg := newProducer(t, cfg, zap.NewNop())
	published := func() float64 {
		return testkit.MetricSum(t, reg, "rate_limit_events_published_total", map[string]string{"topic": topic})
	}
	p.Publish([]byte("k"), []byte("before"))
	testkit.WaitFor(t, 5*time.Second, "the first event published", func() bool { return published() == 1 })

	b.Stop()
	for range 500 {
		p.Publish([]byte("k"), []byte("during"))
	}
	b.Restart(t, topic)

	// Keep publishing until events get through again: the producer must
	// recover without being recreated.
	testkit.WaitFor(t, 30*time.Second, "an event published after the broker's restart", func() bool {
		p.Publish([]byte("k"), []byte("after"))
		return published() > 1
	})
	if dropped := testkit.MetricSum(t, reg, "rate_limit_events_dropped_total", map[string]string{"topic": topic, "reason": "queue_full"}) +
		testkit.MetricSum(t, reg, "rate_limit_events_dropped_total", map[string]string{"topic": topic, "reason": "send_failed"}); dropped == 0 {
		t.Fatal("no drops counted during the outage")
	}
}

func TestProducerPublishAfterClose(t *testing.T) {
	b := kafkatest.StartBroker(t, topic)
	p, reg := newProducer(t, kafkabus.ProducerConfig{Brokers: b.Brokers(), Topic: topic}, zap.NewNop())
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	for range 3 {
		if p.Publish([]byte("k"), []byte("v")) {
			t.Fatal("Publish after Close returned true")
		}
	}
	if got := testkit.MetricSum(t, reg, "rate_limit_events_dropped_total", map[string]string{"topic": topic, "reason": "closed"}); got != 3 {
		t.Fatalf("closed drops = %v, want 3", got)
	}
}

func TestProducersShareRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	brokers := []string{"127.0.0.1:1"}
	var ps []*kafkabus.Producer
	for _, tp := range []string{"ratelimit.decisions", "ratelimit.bans"} {
		p, err := kafkabus.NewProducer(kafkabus.ProducerConfig{Brokers: brokers, Topic: tp}, nil, reg)
		if err != nil {
			t.Fatalf("producer for %s: %v", tp, err)
		}
		ps = append(ps, p)
	}
	if _, err := kafkabus.NewProducer(kafkabus.ProducerConfig{Brokers: brokers, Topic: "ratelimit.bans"}, nil, reg); err == nil {
		t.Fatal("a second producer for the same topic on one registry was accepted")
	}
	for _, p := range ps {
		if err := p.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	for _, tp := range []string{"ratelimit.decisions", "ratelimit.bans"} {
		testkit.MetricSum(t, reg, "rate_limit_event_queue_length", map[string]string{"topic": tp})
	}
}

func TestProducerConfigValidation(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     kafkabus.ProducerConfig
		wantErr string
	}{
		{"no brokers", kafkabus.ProducerConfig{Topic: "t"}, "no brokers"},
		{"empty broker", kafkabus.ProducerConfig{Brokers: []string{" "}, Topic: "t"}, "empty broker"},
		{"no topic", kafkabus.ProducerConfig{Brokers: []string{"127.0.0.1:9092"}}, "no topic"},
		{"negative queue", kafkabus.ProducerConfig{Brokers: []string{"127.0.0.1:9092"}, Topic: "t", QueueSize: -1}, "QueueSize"},
		{"defaults", kafkabus.ProducerConfig{Brokers: []string{"127.0.0.1:9092"}, Topic: "t"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := kafkabus.NewProducer(tc.cfg, nil, nil)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				_ = p.Close(context.Background())
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func BenchmarkPublish(b *testing.B) {
	br := kafkatest.StartBroker(b, topic)
	p, err := kafkabus.NewProducer(kafkabus.ProducerConfig{Brokers: br.Brokers(), Topic: topic}, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	value := []byte(`{"event_id":"0b7e6f0c-5d1e-4a51-9e1c-2f5f6a3b9c01","ts":"2026-11-21T10:30:00.123456Z","ip":"203.0.113.7"}`)
	key := []byte("203.0.113.7")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			p.Publish(key, value)
		}
	})
	b.StopTimer()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = p.Close(ctx)
}
