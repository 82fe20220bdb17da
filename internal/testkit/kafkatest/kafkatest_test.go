package kafkatest_test

import (
	"context"
	"fmt"
	"maps"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/ratewarden/ratewarden/internal/testkit/kafkatest"
)

func write(t *testing.T, brokers []string, topic string, n int) {
	t.Helper()
	msgs := make([]kafka.Message, n)
	for i := range msgs {
		msgs[i] = kafka.Message{Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "v%d", i)}
	}
	kafkatest.Produce(t, brokers, topic, msgs...)
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

// ReadMessages gets every message from a broker that takes up each fetch
// later than 100ms, which was all its readers used to wait for an answer.
func TestReadMessagesFromABrokerThatAnswersLate(t *testing.T) {
	b := kafkatest.StartBroker(t, "a")
	write(t, b.Brokers(), "a", 50)
	b.DelayFetches(300 * time.Millisecond)
	kafkatest.ReadMessages(t, b.Brokers(), "a", 50, time.Minute)
}

// A broker of 12 partitions keeps them across a restart, and a consumer
// group's assignment and committed offsets can be read back.
func TestStartBrokerPartitionsAndGroupState(t *testing.T) {
	b := kafkatest.StartBrokerPartitions(t, 12, "a")
	if got := len(kafkatest.Partitions(t, b.Brokers(), "a")); got != 12 {
		t.Fatalf("a has %d partitions, want 12", got)
	}
	write(t, b.Brokers(), "a", 100)
	ends := kafkatest.EndOffsets(t, b.Brokers(), "a")
	var total int64
	for _, end := range ends {
		total += end
	}
	if len(ends) != 12 || total != 100 {
		t.Fatalf("end offsets %v: %d partitions, %d messages; want 12, 100", ends, len(ends), total)
	}
	if got := kafkatest.CommittedOffsets(t, b.Brokers(), "g", "a"); len(got) != 12 || got[0] != -1 {
		t.Fatalf("committed offsets before any consumer: %v, want 12 × -1", got)
	}
	if state, members := kafkatest.GroupAssignment(t, b.Brokers(), "g", "a"); state != "Dead" || len(members) != 0 {
		t.Fatalf("group before any consumer: %s %v, want Dead and no members", state, members)
	}

	r := kafka.NewReader(kafka.ReaderConfig{Brokers: b.Brokers(), GroupID: "g", Topic: "a", MaxWait: kafkatest.ReaderMaxWait,
		StartOffset: kafka.FirstOffset, SessionTimeout: time.Second, HeartbeatInterval: 200 * time.Millisecond})
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for range 100 {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.CommitMessages(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	state, members := kafkatest.GroupAssignment(t, b.Brokers(), "g", "a")
	if len(members) != 1 {
		t.Fatalf("group %s with members %v, want one", state, members)
	}
	for _, parts := range members {
		if state != "Stable" || len(parts) != 12 {
			t.Fatalf("group %s, partitions %v; want Stable, all 12", state, parts)
		}
	}
	if got := kafkatest.CommittedOffsets(t, b.Brokers(), "g", "a"); !maps.Equal(got, ends) {
		t.Fatalf("committed offsets %v, want the end offsets %v", got, ends)
	}
	if _, members := kafkatest.GroupAssignment(t, b.Brokers(), "g", "other"); len(members) != 0 {
		t.Fatalf("members on a topic nobody reads: %v", members)
	}

	b.Restart(t, "a")
	if got := len(kafkatest.Partitions(t, b.Brokers(), "a")); got != 12 {
		t.Fatalf("a has %d partitions after a restart, want 12", got)
	}
}

// While FailCommits holds, the commits of the named group fail and those of
// others succeed; once restored, the group commits again.
func TestFailCommits(t *testing.T) {
	b := kafkatest.StartBroker(t, "a")
	write(t, b.Brokers(), "a", 10)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	first := func(group string) (*kafka.Reader, kafka.Message) {
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: b.Brokers(), GroupID: group, Topic: "a", MaxWait: kafkatest.ReaderMaxWait,
			StartOffset: kafka.FirstOffset, SessionTimeout: time.Second, HeartbeatInterval: 200 * time.Millisecond})
		t.Cleanup(func() { r.Close() })
		m, err := r.FetchMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return r, m
	}
	restore := b.FailCommits("held")
	held, m := first("held")
	if err := held.CommitMessages(ctx, m); err == nil {
		t.Fatal("a commit of the held group succeeded")
	}
	if got := kafkatest.CommittedOffsets(t, b.Brokers(), "held", "a")[m.Partition]; got != -1 {
		t.Fatalf("held group's committed offset %d after a refused commit, want -1", got)
	}
	free, fm := first("free")
	if err := free.CommitMessages(ctx, fm); err != nil {
		t.Fatalf("a commit of another group: %v", err)
	}
	restore()
	if err := held.CommitMessages(ctx, m); err != nil {
		t.Fatalf("a commit after restore: %v", err)
	}
	if got := kafkatest.CommittedOffsets(t, b.Brokers(), "held", "a")[m.Partition]; got != m.Offset+1 {
		t.Fatalf("held group's committed offset %d after restore, want %d", got, m.Offset+1)
	}
}

// While DelayFetches holds, a fetch whose read deadline falls before the
// delay ends gets none of the messages there are; once restored, it gets
// them again.
func TestDelayFetches(t *testing.T) {
	b := kafkatest.StartBroker(t, "a")
	write(t, b.Brokers(), "a", 10)
	part := -1
	for p, end := range kafkatest.EndOffsets(t, b.Brokers(), "a") {
		if end > 0 {
			part = p
		}
	}
	fetch := func(deadline time.Duration) (int, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := kafka.DialLeader(ctx, "tcp", b.Addr(), "a", part)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if err := conn.SetReadDeadline(time.Now().Add(deadline)); err != nil {
			t.Fatal(err)
		}
		batch := conn.ReadBatch(1, 1<<20)
		n := 0
		for ; ; n++ {
			if _, err := batch.ReadMessage(); err != nil {
				break
			}
		}
		return n, batch.Close()
	}

	if n, err := fetch(10 * time.Second); n == 0 || err != nil {
		t.Fatalf("a fetch got %d messages (err %v), want some", n, err)
	}
	restore := b.DelayFetches(2 * time.Second)
	if n, err := fetch(200 * time.Millisecond); n != 0 || err == nil {
		t.Fatalf("a fetch with a deadline before the delay ends got %d messages (err %v), want none and an error", n, err)
	}
	restore()
	if n, err := fetch(10 * time.Second); n == 0 || err != nil {
		t.Fatalf("a fetch after restore got %d messages (err %v), want some", n, err)
	}
}
