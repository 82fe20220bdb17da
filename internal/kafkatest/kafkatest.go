// Package kafkatest starts an embedded Kafka-protocol broker (kfake) for
// integration tests and reads topics back with kafka-go.
package kafkatest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

// DefaultPartitions is how many partitions StartBroker gives each topic.
const DefaultPartitions = 3

// Broker is a running in-process kfake cluster of one broker.
type Broker struct {
	cluster  *kfake.Cluster
	addr     string
	stopOnce sync.Once
}

// StartBroker starts a one-broker kfake cluster on 127.0.0.1 and a free
// port, with topics created with DefaultPartitions partitions each, and
// stops it when the test ends.
func StartBroker(tb testing.TB, topics ...string) *Broker {
	tb.Helper()
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.GroupMinSessionTimeout(time.Second),
	}
	if len(topics) > 0 {
		opts = append(opts, kfake.SeedTopics(DefaultPartitions, topics...))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		tb.Fatalf("start kfake: %v", err)
	}
	b := &Broker{cluster: c, addr: c.ListenAddrs()[0]}
	tb.Cleanup(b.Stop)
	return b
}

// Addr is the broker's host:port.
func (b *Broker) Addr() string { return b.addr }

// Brokers is Addr as a bootstrap list.
func (b *Broker) Brokers() []string { return []string{b.addr} }

// Cluster is the kfake cluster, for tests that need its controls.
func (b *Broker) Cluster() *kfake.Cluster { return b.cluster }

// Stop shuts the broker down (listener and open connections), simulating a
// broker outage. Safe to call more than once.
func (b *Broker) Stop() { b.stopOnce.Do(b.cluster.Close) }

// Partitions returns the partition ids of topic.
func Partitions(tb testing.TB, brokers []string, topic string) []int {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client := &kafka.Client{Addr: kafka.TCP(brokers...)}
	md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		tb.Fatalf("metadata of %s: %v", topic, err)
	}
	for _, t := range md.Topics {
		if t.Name != topic {
			continue
		}
		if t.Error != nil {
			tb.Fatalf("metadata of %s: %v", topic, t.Error)
		}
		ids := make([]int, 0, len(t.Partitions))
		for _, p := range t.Partitions {
			ids = append(ids, p.ID)
		}
		sort.Ints(ids)
		return ids
	}
	tb.Fatalf("metadata of %s: topic not found", topic)
	return nil
}

// CountMessages returns how many messages topic holds (the sum of the
// partitions' high-water marks minus their start offsets).
func CountMessages(tb testing.TB, brokers []string, topic string) int64 {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := map[string][]kafka.OffsetRequest{}
	for _, p := range Partitions(tb, brokers, topic) {
		req[topic] = append(req[topic], kafka.FirstOffsetOf(p), kafka.LastOffsetOf(p))
	}
	client := &kafka.Client{Addr: kafka.TCP(brokers...)}
	resp, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: req})
	if err != nil {
		tb.Fatalf("list offsets of %s: %v", topic, err)
	}
	var n int64
	for _, po := range resp.Topics[topic] {
		if po.Error != nil {
			tb.Fatalf("list offsets of %s/%d: %v", topic, po.Partition, po.Error)
		}
		n += po.LastOffset - po.FirstOffset
	}
	return n
}

// ReadMessages reads n messages of topic from the start of every partition
// and fails the test if they do not all arrive within timeout. Messages are
// in order within a partition; partitions are interleaved.
func ReadMessages(tb testing.TB, brokers []string, topic string, n int, timeout time.Duration) []kafka.Message {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	parts := Partitions(tb, brokers, topic)

	out := make(chan kafka.Message)
	var wg sync.WaitGroup
	for _, p := range parts {
		r := kafka.NewReader(kafka.ReaderConfig{
			Brokers:   brokers,
			Topic:     topic,
			Partition: p,
			MinBytes:  1,
			MaxBytes:  10 << 20,
			MaxWait:   100 * time.Millisecond,
		})
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer r.Close()
			for {
				m, err := r.ReadMessage(ctx)
				if err != nil {
					return
				}
				select {
				case out <- m:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	defer wg.Wait()
	defer cancel()

	msgs := make([]kafka.Message, 0, n)
	for len(msgs) < n {
		select {
		case m := <-out:
			msgs = append(msgs, m)
		case <-ctx.Done():
			err := ctx.Err()
			if errors.Is(err, context.DeadlineExceeded) {
				err = fmt.Errorf("timed out after %s", timeout)
			}
			tb.Fatalf("read %s: %d of %d messages arrived: %v", topic, len(msgs), n, err)
		}
	}
	return msgs
}

// Restart starts a fresh broker (empty, topics created again) on the
// address of a stopped one, simulating a broker that comes back.
func (b *Broker) Restart(tb testing.TB, topics ...string) {
	tb.Helper()
	b.Stop()
	_, portStr, err := net.SplitHostPort(b.addr)
	if err != nil {
		tb.Fatal(err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		tb.Fatal(err)
	}
	opts := []kfake.Opt{kfake.Ports(port), kfake.GroupMinSessionTimeout(time.Second)}
	if len(topics) > 0 {
		opts = append(opts, kfake.SeedTopics(DefaultPartitions, topics...))
	}
	var c *kfake.Cluster
	// The old listener's port can take a moment to be free again.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if c, err = kfake.NewCluster(opts...); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		tb.Fatalf("restart kfake on %s: %v", b.addr, err)
	}
	tb.Cleanup(c.Close) // Close is idempotent
	b.cluster, b.stopOnce = c, sync.Once{}
}
