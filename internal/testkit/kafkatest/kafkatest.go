// Package kafkatest starts an embedded Kafka-protocol broker (kfake) for
// integration tests and reads topics back with kafka-go.
package kafkatest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DefaultPartitions is how many partitions StartBroker gives each topic.
const DefaultPartitions = 3

// ReaderMaxWait and ReaderMaxBytes are fetch settings for kafka-go readers
// in tests, chosen as kafkabus chooses its consumer's: kafka-go gives the
// broker only min(MaxWait/4, 1s) past the wait it asks for to answer before
// it cuts the fetch off and dials again, so 1.5s leaves it a second (100ms
// left it 25ms, which a busy machine overran); and a 1 MB answer is quick
// to build.
const (
	ReaderMaxWait  = 1500 * time.Millisecond
	ReaderMaxBytes = 1 << 20
)

// Broker is a running in-process kfake cluster of one broker.
type Broker struct {
	cluster    *kfake.Cluster
	addr       string
	partitions int32 // of each topic created, again by Restart
	stopOnce   sync.Once
}

// StartBroker starts a one-broker kfake cluster on 127.0.0.1 and a free
// port, with topics created with DefaultPartitions partitions each, and
// stops it when the test ends.
func StartBroker(tb testing.TB, topics ...string) *Broker {
	tb.Helper()
	return StartBrokerPartitions(tb, DefaultPartitions, topics...)
}

// StartBrokerPartitions is StartBroker with topics of the given number of
// partitions, for tests that spread work over more consumers than
// DefaultPartitions allows.
func StartBrokerPartitions(tb testing.TB, partitions int, topics ...string) *Broker {
	tb.Helper()
	if partitions < 1 || partitions > math.MaxInt32 {
		tb.Fatalf("start kfake: %d partitions", partitions)
	}
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.GroupMinSessionTimeout(time.Second),
	}
	if len(topics) > 0 {
		opts = append(opts, kfake.SeedTopics(int32(partitions), topics...))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		tb.Fatalf("start kfake: %v", err)
	}
	b := &Broker{cluster: c, addr: c.ListenAddrs()[0], partitions: int32(partitions)}
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

// FailCommits makes the broker refuse every offset commit of the consumer
// groups, with the retriable COORDINATOR_LOAD_IN_PROGRESS on each partition,
// until the returned function is called: their consumers go on handling
// messages whose offsets stay uncommitted, as under a coordinator in
// trouble, so a consumer that dies then leaves handled messages to be
// delivered again.
func (b *Broker) FailCommits(groups ...string) (restore func()) {
	var failing atomic.Bool
	failing.Store(true)
	c := b.cluster
	c.ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if !failing.Load() {
			c.DropControl()
			return nil, nil, false
		}
		commit := req.(*kmsg.OffsetCommitRequest)
		if !slices.Contains(groups, commit.Group) {
			return nil, nil, false
		}
		c.KeepControl()
		resp := commit.ResponseKind().(*kmsg.OffsetCommitResponse)
		for _, t := range commit.Topics {
			rt := kmsg.NewOffsetCommitResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetCommitResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, kerr.CoordinatorLoadInProgress.Code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil, true
	})
	return func() { failing.Store(false) }
}

// DelayFetches makes the broker take up every fetch only delay after it
// arrives, as a busy broker or a slow network would, until the returned
// function is called: a client whose read deadline leaves the broker less
// than delay to answer never gets an answer. The broker serves other
// connections meanwhile.
func (b *Broker) DelayFetches(delay time.Duration) (restore func()) {
	var delaying atomic.Bool
	delaying.Store(true)
	c := b.cluster
	c.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		if !delaying.Load() {
			c.DropControl()
			return nil, nil, false
		}
		c.SleepControl(func() { time.Sleep(delay) })
		return nil, nil, false // then handled as usual
	})
	return func() { delaying.Store(false) }
}

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

// EndOffsets returns the high-water mark of every partition of topic: the
// offset its next message will get.
func EndOffsets(tb testing.TB, brokers []string, topic string) map[int]int64 {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := map[string][]kafka.OffsetRequest{}
	for _, p := range Partitions(tb, brokers, topic) {
		req[topic] = append(req[topic], kafka.LastOffsetOf(p))
	}
	client := &kafka.Client{Addr: kafka.TCP(brokers...)}
	resp, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: req})
	if err != nil {
		tb.Fatalf("list offsets of %s: %v", topic, err)
	}
	ends := map[int]int64{}
	for _, po := range resp.Topics[topic] {
		if po.Error != nil {
			tb.Fatalf("list offsets of %s/%d: %v", topic, po.Partition, po.Error)
		}
		ends[po.Partition] = po.LastOffset
	}
	return ends
}

// CommittedOffsets returns the offset consumer group group has committed on
// every partition of topic, -1 where it has committed none.
func CommittedOffsets(tb testing.TB, brokers []string, group, topic string) map[int]int64 {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client := &kafka.Client{Addr: kafka.TCP(brokers...)}
	resp, err := client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group,
		Topics: map[string][]int{topic: Partitions(tb, brokers, topic)}})
	if err == nil {
		err = resp.Error
	}
	committed := map[int]int64{}
	if errors.Is(err, kafka.GroupIdNotFound) {
		// kfake's answer before the group's first member; Kafka answers -1s.
		for _, p := range Partitions(tb, brokers, topic) {
			committed[p] = -1
		}
		return committed
	}
	if err != nil {
		tb.Fatalf("committed offsets of %s on %s: %v", group, topic, err)
	}
	for _, p := range resp.Topics[topic] {
		if p.Error != nil {
			tb.Fatalf("committed offset of %s on %s/%d: %v", group, topic, p.Partition, p.Error)
		}
		committed[p.Partition] = p.CommittedOffset
	}
	return committed
}

// GroupAssignment returns the state of consumer group group ("Stable",
// "PreparingRebalance", ..., "Dead" before its first member joins) and the
// partitions of topic assigned to each of its members, by member id;
// members subscribed to other topics only are left out.
func GroupAssignment(tb testing.TB, brokers []string, group, topic string) (string, map[string][]int) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client := &kafka.Client{Addr: kafka.TCP(brokers...)}
	resp, err := client.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{group}})
	if err == nil && len(resp.Groups) != 1 {
		err = fmt.Errorf("%d groups described", len(resp.Groups))
	}
	if err == nil {
		err = resp.Groups[0].Error
	}
	members := map[string][]int{}
	if errors.Is(err, kafka.GroupIdNotFound) {
		return "Dead", members
	}
	if err != nil {
		tb.Fatalf("describe group %s: %v", group, err)
	}
	for _, m := range resp.Groups[0].Members {
		if !slices.Contains(m.MemberMetadata.Topics, topic) {
			continue
		}
		var parts []int
		for _, a := range m.MemberAssignments.Topics {
			if a.Topic == topic {
				parts = append(parts, a.Partitions...)
			}
		}
		sort.Ints(parts)
		members[m.MemberID] = parts
	}
	return resp.Groups[0].GroupState, members
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
			MaxBytes:  ReaderMaxBytes,
			MaxWait:   ReaderMaxWait,
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

// Restart starts a fresh broker (empty, topics created again with the
// partitions of the first start) on the address of a stopped one,
// simulating a broker that comes back.
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
		opts = append(opts, kfake.SeedTopics(b.partitions, topics...))
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

// Produce writes msgs to topic and returns once the broker has
// acknowledged every one (all replicas), or fails tb.
func Produce(tb testing.TB, brokers []string, topic string, msgs ...kafka.Message) {
	tb.Helper()
	// RequireAll: kafka-go's default is not to wait for the broker at all.
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, Balancer: &kafka.Hash{}, BatchTimeout: time.Millisecond,
		RequiredAcks: kafka.RequireAll, Transport: &kafka.Transport{}} // not the shared default: see kafkabus.NewBanPublisher
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		tb.Fatalf("produce to %s: %v", topic, err)
	}
}
