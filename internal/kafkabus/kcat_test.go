package kafkabus_test

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/kafkabus"
	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/kafkatest"
)

// TestKcatReadsWhatProducerWrote proves interoperability with an independent
// Kafka client (librdkafka's kcat): our producer writes decision events, kcat
// reads them back from every partition.
func TestKcatReadsWhatProducerWrote(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		testkit.Unavailable(t, "kcat not found: install it (apt-get install -y kcat) to run this test")
	}
	const n = 200
	b := kafkatest.StartBroker(t, topic)
	p, _ := newProducer(t, kafkabus.ProducerConfig{Brokers: b.Brokers(), Topic: topic}, zap.NewNop())
	want := make(map[string]string, n)
	var buf []byte
	for i := range n {
		d := event.Decision{
			EventID: fmt.Sprintf("e-%d", i), TS: time.Date(2026, 11, 21, 10, 30, 0, i*1000, time.UTC),
			IP: fmt.Sprintf("198.51.100.%d", i), Endpoint: "/api/books/17", Method: "GET", Reason: event.ReasonOK, Allowed: true,
		}
		buf = d.AppendJSON(buf[:0])
		value := append([]byte(nil), buf...)
		want[d.IP] = string(value)
		p.Publish([]byte(d.IP), value)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}

	cmd := exec.CommandContext(ctx, kcat, "-C", "-b", b.Addr(), "-t", topic, "-o", "beginning",
		"-c", fmt.Sprint(n), "-e", "-q", "-f", `%k %s\n`)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kcat: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != n {
		t.Fatalf("kcat printed %d lines, want %d\n%s", len(lines), n, stderr.String())
	}
	for _, line := range lines {
		key, value, _ := strings.Cut(line, " ")
		if want[key] != value {
			t.Fatalf("kcat read key %q value %s, want %s", key, value, want[key])
		}
		if _, err := event.DecodeDecision([]byte(value)); err != nil {
			t.Fatalf("value read by kcat does not decode: %v", err)
		}
		delete(want, key)
	}
}

// TestPartitioningMatchesJavaClients checks that our producer puts a key on
// the partition librdkafka's murmur2 partitioner (the Java client's default
// for keyed messages) chooses, so other producers keep per-key order.
func TestPartitioningMatchesJavaClients(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		testkit.Unavailable(t, "kcat not found: install it (apt-get install -y kcat) to run this test")
	}
	const ours, theirs = "ours", "theirs"
	b := kafkatest.StartBroker(t, ours, theirs)
	p, _ := newProducer(t, kafkabus.ProducerConfig{Brokers: b.Brokers(), Topic: ours}, zap.NewNop())
	var input strings.Builder
	for i := range 50 {
		key := fmt.Sprintf("198.51.100.%d", i)
		p.Publish([]byte(key), []byte("v"))
		fmt.Fprintf(&input, "%s:v\n", key)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	produce := exec.CommandContext(ctx, kcat, "-P", "-b", b.Addr(), "-t", theirs, "-K", ":", "-X", "partitioner=murmur2_random")
	produce.Stdin = strings.NewReader(input.String())
	if out, err := produce.CombinedOutput(); err != nil {
		t.Fatalf("kcat -P: %v\n%s", err, out)
	}
	partitions := func(topic string) map[string]string {
		out, err := exec.CommandContext(ctx, kcat, "-C", "-b", b.Addr(), "-t", topic, "-o", "beginning",
			"-c", "50", "-e", "-q", "-f", `%k %p\n`).Output()
		if err != nil {
			t.Fatalf("kcat -C %s: %v", topic, err)
		}
		m := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			k, part, _ := strings.Cut(line, " ")
			m[k] = part
		}
		if len(m) != 50 {
			t.Fatalf("kcat read %d keys from %s", len(m), topic)
		}
		return m
	}
	got, want := partitions(ours), partitions(theirs)
	for k, part := range want {
		if got[k] != part {
			t.Fatalf("key %s: our partition %s, murmur2 (Java) partition %s", k, got[k], part)
		}
	}
}
