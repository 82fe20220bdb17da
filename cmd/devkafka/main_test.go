package main

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/kafkabus"
	"github.com/ratewarden/ratewarden/internal/testkit/kafkatest"
	"github.com/ratewarden/ratewarden/internal/testkit/proctest"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// run creates every topic of the stack, the access-log topic when it is
// set (the detector reads it, and kcat -P waits for a topic that does not
// exist).
func TestRunServesTheTopicsAndStopsOnCancel(t *testing.T) {
	addr := proctest.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr proctest.Output
	exit := make(chan int, 1)
	go func() {
		exit <- run(ctx, []string{"-partitions", "4", "-bans-topic", "test.bans"},
			env(map[string]string{"LISTEN_ADDR": addr, "DECISIONS_TOPIC": "test.decisions", "ACCESS_LOG_TOPIC": "test.access"}), &stderr)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(stderr.String(), "devkafka ready") {
		if time.Now().After(deadline) {
			t.Fatalf("not ready within 10s; log:\n%s", stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, want := range []string{addr, "test.decisions,test.bans,ratelimit.outcomes,test.access"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("ready log does not mention %s:\n%s", want, stderr.String())
		}
	}
	brokers := []string{addr}
	for _, topic := range []string{"test.decisions", "test.bans", "ratelimit.outcomes", "test.access"} {
		if got := len(kafkatest.Partitions(t, brokers, topic)); got != 4 {
			t.Errorf("%s has %d partitions, want 4", topic, got)
		}
	}

	p, err := kafkabus.NewProducer(kafkabus.ProducerConfig{Brokers: brokers, Topic: "test.decisions"}, zap.NewNop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	p.Publish([]byte("203.0.113.7"), []byte(`{"hello":"devkafka"}`))
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	msgs := kafkatest.ReadMessages(t, brokers, "test.decisions", 1, 10*time.Second)
	if string(msgs[0].Key) != "203.0.113.7" || string(msgs[0].Value) != `{"hello":"devkafka"}` {
		t.Fatalf("read back %s=%s", msgs[0].Key, msgs[0].Value)
	}

	cancel()
	select {
	case code := <-exit:
		if code != 0 {
			t.Fatalf("exit code %d; log:\n%s", code, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return within 10s of cancel")
	}
	// The stopping line comes before the broker stops, the stopped line after.
	log := stderr.String()
	if stopping, stopped := strings.Index(log, "devkafka stopping"), strings.Index(log, "devkafka stopped"); stopping < 0 || stopped < stopping {
		t.Errorf("no stopping line followed by a stopped line in log:\n%s", log)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("port still held after stop: %v", err)
	}
	ln.Close()
}

func TestRunRefusesBadConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"listen addr without port", nil, map[string]string{"LISTEN_ADDR": "127.0.0.1"}, "LISTEN_ADDR: expected host:port"},
		{"listen addr bad port", nil, map[string]string{"LISTEN_ADDR": "127.0.0.1:http"}, "LISTEN_ADDR: expected host:port"},
		{"listen flag", []string{"-listen-addr", "127.0.0.1:99999"}, nil, "-listen-addr: expected host:port"},
		{"partitions zero", []string{"-partitions", "0"}, nil, "-partitions: expected an integer between 1 and 10000, got \"0\""},
		{"partitions text", []string{"-partitions=many"}, nil, "-partitions: expected"},
		{"partitions env", nil, map[string]string{"DEVKAFKA_PARTITIONS": "-3"}, "DEVKAFKA_PARTITIONS: expected"},
		{"retention", []string{"-retention", "forever"}, nil, "-retention: expected"},
		{"retention bytes", nil, map[string]string{"DEVKAFKA_RETENTION_BYTES": "1GB"}, "DEVKAFKA_RETENTION_BYTES: expected"},
		{"topic name", nil, map[string]string{"DECISIONS_TOPIC": "bad topic"}, "DECISIONS_TOPIC: expected a Kafka topic name"},
		{"same topics", nil, map[string]string{"BANS_TOPIC": "ratelimit.decisions"}, "BANS_TOPIC: expected a topic other than the decisions topic"},
		{"log level", nil, map[string]string{"LOG_LEVEL": "loud"}, "LOG_LEVEL: expected"},
		{"log format", nil, map[string]string{"LOG_FORMAT": "xml"}, "LOG_FORMAT: expected"},
		{"unknown flag", []string{"-nope"}, nil, "-nope"},
		{"stray argument", []string{"serve"}, nil, "unexpected argument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr proctest.Output
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if code := run(ctx, tc.args, env(tc.env), &stderr); code != 2 {
				t.Fatalf("exit code %d, want 2; stderr:\n%s", code, stderr.String())
			}
			out := stderr.String()
			if !strings.Contains(out, tc.want) {
				t.Fatalf("stderr does not contain %q:\n%s", tc.want, out)
			}
			if strings.Count(strings.TrimSpace(out), "\n") != 0 {
				t.Fatalf("want one line, got:\n%s", out)
			}
		})
	}
}

func TestRunFailsWhenPortTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var stderr proctest.Output
	code := run(context.Background(), nil, env(map[string]string{"LISTEN_ADDR": ln.Addr().String()}), &stderr)
	if code != 1 || !strings.Contains(stderr.String(), ln.Addr().String()) {
		t.Fatalf("exit code %d, stderr:\n%s", code, stderr.String())
	}
}

func TestConfigPrecedence(t *testing.T) {
	cfg, err := loadConfig([]string{"-partitions", "3"},
		env(map[string]string{"DEVKAFKA_PARTITIONS": "7", "LISTEN_ADDR": "127.0.0.1:19092", "DEVKAFKA_RETENTION": "10m"}), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	b := cfg.broker
	if b.Partitions != 3 || b.ListenAddr != "127.0.0.1:19092" || b.Retention != 10*time.Minute ||
		b.DecisionsTopic != "ratelimit.decisions" || b.BansTopic != "ratelimit.bans" || b.RetentionBytes != 256<<20 {
		t.Fatalf("config %+v", b)
	}
}
