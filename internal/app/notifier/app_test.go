package notifier

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	"go.uber.org/zap/zaptest"

	"github.com/ratewarden/ratewarden/internal/config"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/kafkabus"
	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/kafkatest"
)

const bansTopic = "bans"

// testConfig is the notifier's configuration as the environment env (over
// the defaults and short windows) gives it, on broker, with the receivers
// file receivers.
func testConfig(t *testing.T, broker *kafkatest.Broker, group, receivers string, env map[string]string) config.Notifier {
	t.Helper()
	file := filepath.Join(t.TempDir(), "receivers.yaml")
	if err := os.WriteFile(file, []byte(receivers), 0o600); err != nil {
		t.Fatal(err)
	}
	all := map[string]string{
		"KAFKA_BROKERS": broker.Addr(), "LISTEN_ADDR": "127.0.0.1:0", "BANS_TOPIC": bansTopic, "NOTIFY_GROUP_ID": group,
		"NOTIFY_RECEIVERS_FILE": file, "NOTIFY_DIGEST_DELAY": "1s", "NOTIFY_DIGEST_GRACE": "300ms", "NOTIFY_MAX_BACKOFF": "200ms",
		"NOTIFY_TIMEOUT": "5s",
	}
	for k, v := range env {
		all[k] = v
	}
	cfg, err := config.LoadNotifier(func(k string) string { return all[k] })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// running is one notifier's Run on a goroutine.
type running struct {
	app *App
	reg *prometheus.Registry
	*testkit.Running
}

func start(t *testing.T, cfg config.Notifier, name string) *running {
	t.Helper()
	reg := prometheus.NewRegistry()
	a, err := New(cfg, Deps{Log: zaptest.NewLogger(t).Named(name), Registry: reg, MinBackoff: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r := &running{app: a, reg: reg, Running: testkit.Start(t, a.Run)}
	testkit.WaitFor(t, time.Minute, "readiness", func() bool { return a.Addr() != "" && status(a.Addr(), "/readyz") == http.StatusOK })
	return r
}

func (r *running) metric(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	return testkit.MetricSum(t, r.reg, name, labels)
}

// bans returns n messages of bans of scenario reason, stamped at (all in
// one window when at is one instant).
func bans(n int, reason string, at time.Time) []kafka.Message {
	out := make([]kafka.Message, n)
	for i := range out {
		b := event.Ban{BanID: uuid.NewString(), TS: at, Action: event.ActionBan, Scope: event.ScopeIP,
			Subject: fmt.Sprintf("203.0.113.%d", i%250), Reason: reason, Count: 30, Threshold: 20, WindowS: 300, DurationS: 3600,
			ExpiresAt: at.Add(time.Hour), Source: "detector", Evidence: event.Evidence{SampleEndpoints: []string{"/login"}}}
		v, err := event.EncodeBan(b)
		if err != nil {
			panic(err)
		}
		out[i] = kafka.Message{Key: []byte(b.Key() + fmt.Sprint(i)), Value: v, Time: at}
	}
	return out
}

// committedAll reports whether group has committed the end of every
// partition of the bans topic.
func committedAll(t *testing.T, broker *kafkatest.Broker, group string) bool {
	t.Helper()
	ends := kafkatest.EndOffsets(t, broker.Brokers(), bansTopic)
	done := kafkatest.CommittedOffsets(t, broker.Brokers(), group, bansTopic)
	for p, end := range ends {
		if end > 0 && done[p] != end {
			return false
		}
	}
	return true
}

// status returns the status of GET path on addr, 0 when it cannot be had.
func status(addr, path string) int {
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return 0
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// 200 credential-stuffing bans in one window become one message per
// receiver, with their count and five examples; a hostile message among
// them is skipped, counted and committed; an unban, which the receivers
// do not ask for, is not sent.
func TestTwoHundredBansBecomeOneMessage(t *testing.T) {
	broker := kafkatest.StartBroker(t, bansTopic)
	js, slack := newHook(t), newHook(t)
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	group := "notifier-" + uuid.NewString()
	n := start(t, testConfig(t, broker, group, fmt.Sprintf(`receivers:
  - {name: siem, url: %q, bearer_token_file: %q}
  - {name: chat, url: %q, format: slack, scenarios: [credential_stuffing]}
`, js.srv.URL, token, slack.srv.URL), nil), "notifier")

	at := time.Now()
	msgs := bans(200, "credential_stuffing", at)
	unban, _ := event.EncodeBan(event.Ban{BanID: "u1", TS: at, Action: event.ActionUnban, Scope: event.ScopeIP, Subject: "203.0.113.1",
		Reason: "manual", Source: "admin"})
	msgs = append(msgs, kafka.Message{Key: []byte("x"), Value: []byte("not json"), Time: at},
		kafka.Message{Key: []byte("y"), Value: []byte(`{"ban_id":"","ts":"2026-01-01T00:00:00Z"}`), Time: at},
		kafka.Message{Key: []byte("ip:203.0.113.1"), Value: unban, Time: at})
	kafkatest.Produce(t, broker.Brokers(), bansTopic, msgs...)

	testkit.WaitFor(t, time.Minute, "the digests and the commit", func() bool {
		a, _ := js.got()
		b, _ := slack.got()
		return len(a) > 0 && len(b) > 0 && committedAll(t, broker, group)
	})
	got, _ := js.got()
	if len(got) != 1 {
		t.Fatalf("siem got %d messages, want 1", len(got))
	}
	d := got[0]
	if d.body["count"] != 200.0 || d.body["scenario"] != "credential_stuffing" || d.body["examples_omitted"] != 195.0 {
		t.Errorf("digest %s", d.raw)
	}
	if ex, _ := d.body["examples"].([]any); len(ex) != 5 {
		t.Errorf("%d examples, want 5", len(ex))
	}
	if d.key == "" || d.body["idempotency_key"] != d.key || d.auth != "Bearer s3cret" {
		t.Errorf("key header %q, body key %v, authorization %q", d.key, d.body["idempotency_key"], d.auth)
	}
	chat, _ := slack.got()
	if text, _ := chat[0].body["text"].(string); len(chat) != 1 || !strings.Contains(text, "200 ip bans for credential_stuffing") {
		t.Errorf("chat got %d messages: %s", len(chat), chat[0].raw)
	}
	if chat[0].key == d.key {
		t.Error("two receivers' digests share a key")
	}
	if got := n.metric(t, "rate_limit_notifier_messages_skipped_total", nil); got != 2 {
		t.Errorf("%v messages skipped, want 2", got)
	}
	if got := n.metric(t, "rate_limit_notifier_bans_delivered_total", map[string]string{"receiver": "siem"}); got != 200 {
		t.Errorf("%v bans delivered to siem, want 200", got)
	}
	n.Stop(t)
}

// A receiver down is retried with backoff and gets every ban once it is
// back; while it is down the notifier holds at most NOTIFY_MAX_PENDING
// messages, commits nothing and reads no further, while another consumer
// group of the same topic (as the detector's and the archiver's are) reads
// every message: a receiver down holds back this group alone.
func TestReceiverDownThenBack(t *testing.T) {
	broker := kafkatest.StartBroker(t, bansTopic)
	h := newHook(t)
	h.down.Store(true)
	group := "notifier-" + uuid.NewString()
	n := start(t, testConfig(t, broker, group, fmt.Sprintf("receivers:\n  - {name: siem, url: %q}\n", h.srv.URL),
		map[string]string{"NOTIFY_MAX_PENDING": "5"}), "notifier")

	const total = 50
	kafkatest.Produce(t, broker.Brokers(), bansTopic, bans(total, "violations_5m", time.Now())...)
	if got := consumeInAnotherGroup(t, broker, total); got != total {
		t.Fatalf("another consumer group of the topic read %d messages, want %d", got, total)
	}
	testkit.WaitFor(t, time.Minute, "retries", func() bool {
		return n.metric(t, "rate_limit_notifier_delivery_retries_total", map[string]string{"receiver": "siem"}) >= 5
	})
	if got := n.metric(t, "rate_limit_notifier_pending_messages", nil); got > 5 {
		t.Errorf("%v messages held, want at most 5", got)
	}
	if got := n.metric(t, "rate_limit_notifier_messages_total", nil); got > 5 {
		t.Errorf("%v messages read while the receiver is down, want at most 5", got)
	}
	for p, off := range kafkatest.CommittedOffsets(t, broker.Brokers(), group, bansTopic) {
		if off > 0 {
			t.Errorf("partition %d committed at %d while the receiver is down", p, off)
		}
	}
	if got := n.metric(t, "rate_limit_notifier_delivery_attempts_total", map[string]string{"receiver": "siem", "result": "status_5xx"}); got < 5 {
		t.Errorf("%v failed attempts counted", got)
	}

	h.down.Store(false)
	testkit.WaitFor(t, time.Minute, "every ban delivered and committed", func() bool {
		return h.counted() >= total && committedAll(t, broker, group)
	})
	if got := h.counted(); got != total {
		t.Errorf("the receiver counted %d bans, want %d", got, total)
	}
	n.Stop(t)
}

// A notifier stopped after its receiver accepted a digest and before the
// offsets were committed sends the digest again at its next start, with
// the same idempotency key and content: the receiver can tell it has it.
func TestRestartBetweenDeliveryAndCommit(t *testing.T) {
	broker := kafkatest.StartBroker(t, bansTopic)
	h := newHook(t)
	group := "notifier-" + uuid.NewString()
	cfg := testConfig(t, broker, group, fmt.Sprintf("receivers:\n  - {name: siem, url: %q}\n", h.srv.URL), nil)

	restore := broker.FailCommits(group)
	first := start(t, cfg, "first")
	kafkatest.Produce(t, broker.Brokers(), bansTopic, bans(30, "credential_stuffing", time.Now())...)
	testkit.WaitFor(t, time.Minute, "the first delivery", func() bool { got, _ := h.got(); return len(got) > 0 })
	first.Stop(t)
	restore()
	before, _ := h.got()
	if committedAll(t, broker, group) {
		t.Fatal("the offsets were committed while the broker refused commits")
	}

	second := start(t, cfg, "second")
	testkit.WaitFor(t, time.Minute, "the delivery again and the commit", func() bool {
		got, _ := h.got()
		return len(got) >= 2*len(before) && committedAll(t, broker, group)
	})
	after, _ := h.got()
	again := after[len(before):]
	if len(again) != len(before) {
		t.Fatalf("%d digests sent again, want %d", len(again), len(before))
	}
	for i := range before {
		if again[i].key != before[i].key || string(again[i].raw) != string(before[i].raw) {
			t.Errorf("digest %d sent again as %s (key %s), first %s (key %s)", i, again[i].raw, again[i].key, before[i].raw, before[i].key)
		}
	}
	second.Stop(t)
}

// consumeInAnotherGroup reads the bans topic in a consumer group of its own
// with the consumer the detector and the archiver use, until it has
// handled want messages or a minute has passed, and returns how many it
// handled.
func consumeInAnotherGroup(t *testing.T, broker *kafkatest.Broker, want int) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var handled atomic.Int64
	err := kafkabus.Consume(ctx, kafkabus.ConsumerConfig{Brokers: broker.Brokers(), Topic: bansTopic, GroupID: "other-" + uuid.NewString()},
		zaptest.NewLogger(t).Named("other"), func(_ context.Context, msgs []event.Message) error {
			if handled.Add(int64(len(msgs))) >= int64(want) {
				cancel()
			}
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	return int(handled.Load())
}

func TestNewRequiresLoggerRegistryAndReceivers(t *testing.T) {
	if _, err := New(config.Notifier{}, Deps{}); err == nil {
		t.Error("New accepted no logger and no registry")
	}
	_, err := New(config.Notifier{}, Deps{Log: zaptest.NewLogger(t), Registry: prometheus.NewRegistry()})
	if err == nil || !strings.Contains(err.Error(), "NOTIFY_RECEIVERS_FILE") {
		t.Errorf("New without a receivers file: %v", err)
	}
}
