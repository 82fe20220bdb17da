package detector

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/ratewarden/ratewarden/internal/abuse"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/rules"
	"github.com/ratewarden/ratewarden/internal/testkit/abusetest"
)

// recorder is a Publisher that keeps what it is given.
type recorder struct{ bans []event.Ban }

func (r *recorder) Publish(_ context.Context, bans ...event.Ban) error {
	r.bans = append(r.bans, bans...)
	return nil
}

// testService is the consumer of a decision source on memory state whose
// engine's clock reads now, with a scan threshold of 5 distinct endpoints.
func testService(t *testing.T, now time.Time, w abuse.Windows) (*Consumer, *recorder, *observer.ObservedLogs) {
	t.Helper()
	det := rules.DefaultDetection()
	det.Scan = &rules.ScanPolicy{DistinctEndpoints: 5, Within: rules.Duration(10 * time.Second), Duration: rules.Duration(time.Hour)}
	if w == nil {
		w = abusetest.NewMemoryWindows()
	}
	pub := &recorder{}
	engine := abuse.NewEngine(abuse.Config{Detection: det, Now: func() time.Time { return now }}, w, abusetest.NewMemoryLedger(), pub)
	core, logs := observer.New(zapcore.InfoLevel)
	svc := newService(t, zap.New(core), prometheus.NewRegistry(), Source{Name: SourceDecisions, Pipeline: DecisionPipeline(engine)})
	return svc.Consumers()[0], pub, logs
}

// message is a decisions message with value v at offset off.
func message(off int64, v []byte) event.Message {
	return event.Message{Topic: "ratelimit.decisions", Partition: int(off % 3), Offset: off, Value: v}
}

// valid is an allowed decision of ip for endpoint at ts.
func valid(id string, ts time.Time, ip, endpoint string) event.Decision {
	return event.Decision{EventID: id, TS: ts, Instance: "limiter-1", IP: ip, Endpoint: endpoint, Method: "GET",
		Allowed: true, Reason: event.ReasonOK, Mode: "redis"}
}

// scanMessages are the messages of a scan of n distinct endpoints by ip,
// from offset from on, stamped just before now.
func scanMessages(from int64, n int, ip string, now time.Time) []event.Message {
	var out []event.Message
	for i := range n {
		ev := valid(fmt.Sprintf("scan-%d", i), now.Add(-time.Second+time.Duration(i)*time.Millisecond), ip, fmt.Sprintf("/api/scan/%d", i))
		out = append(out, message(from+int64(i), ev.AppendJSON(nil)))
	}
	return out
}

// Each kind of message that can never be processed is skipped and counted
// by kind, in the batch that carries them; the rest of the batch is
// detected as usual and Handle succeeds, so the consumer commits.
func TestHandleSkipsPoison(t *testing.T) {
	now := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC) // the injected clock
	svc, pub, logs := testService(t, now, nil)
	poison := func(edit func(*event.Decision)) []byte {
		d := valid("p", now, "192.0.2.1", "/api/x")
		edit(&d)
		return d.AppendJSON(nil)
	}
	msgs := []event.Message{
		message(0, poison(func(d *event.Decision) { d.Endpoint = "/" + strings.Repeat("x", 1<<20) })),
		message(1, poison(func(d *event.Decision) { d.TS = time.Time{} })),
		message(2, poison(func(d *event.Decision) { d.IP = "not-an-ip" })),
		message(3, poison(func(d *event.Decision) { d.UserID = strings.Repeat("u", event.MaxUserID+1) })),
		message(4, []byte(`{"event_id":`)),
	}
	msgs = append(msgs, scanMessages(5, 5, "203.0.113.66", now)...)
	if err := svc.Handle(context.Background(), msgs); err != nil {
		t.Fatalf("Handle: %v, want the poison skipped", err)
	}
	for field, want := range map[string]float64{"endpoint": 1, "ts": 1, "ip": 1, "user_id": 1, "tier": 0} {
		if got := testutil.ToFloat64(svc.metrics.invalid.WithLabelValues(field)); got != want {
			t.Errorf("invalid events of field %s: %v, want %v", field, got, want)
		}
	}
	if got := testutil.ToFloat64(svc.metrics.undecodable); got != 1 {
		t.Errorf("undecodable events: %v, want 1", got)
	}
	if n := testutil.ToFloat64(svc.metrics.failures); n != 0 {
		t.Errorf("batch failures: %v, want none", n)
	}
	if len(pub.bans) != 1 || pub.bans[0].Subject != "203.0.113.66" {
		t.Fatalf("published %+v, want the scanner's ban", pub.bans)
	}
	if n := logs.FilterMessageSnippet("skipped").Len(); n != 5 {
		t.Errorf("%d lines about skipped events, want one per kind (5)", n)
	}
	for _, e := range logs.All() {
		if len(e.Message)+len(fmt.Sprint(e.ContextMap())) > 1000 {
			t.Errorf("a log line of over 1000 bytes: %.200s", fmt.Sprint(e.ContextMap()))
		}
	}
}

// Skipped messages of one kind are logged once per interval, however many.
func TestSkippedEventsLoggedOncePerInterval(t *testing.T) {
	now := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	svc, _, logs := testService(t, now, nil)
	for i := range 3 {
		if err := svc.Handle(context.Background(), []event.Message{message(int64(i), []byte("{not json"))}); err != nil {
			t.Fatal(err)
		}
	}
	if n := logs.FilterMessageSnippet("skipped").Len(); n != 1 {
		t.Errorf("%d lines for 3 undecodable messages within a minute, want 1", n)
	}
	if got := testutil.ToFloat64(svc.metrics.undecodable); got != 3 {
		t.Errorf("undecodable events: %v, want 3", got)
	}
}

// Events ahead of the detector's clock are counted, and logged once per
// interval and instance.
func TestFutureEventsCountedAndLogged(t *testing.T) {
	now := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	svc, _, logs := testService(t, now, nil)
	ahead := now.AddDate(1, 0, 0)
	batch := func(instance string, from int64) []event.Message {
		var out []event.Message
		for i := range 4 {
			d := valid(fmt.Sprint(instance, from+int64(i)), ahead, "192.0.2.1", "/api/x")
			d.Instance = instance
			out = append(out, message(from+int64(i), d.AppendJSON(nil)))
		}
		return out
	}
	for _, b := range [][]event.Message{batch("limiter-fast", 0), batch("limiter-fast", 4), batch("limiter-other", 8)} {
		if err := svc.Handle(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
	if got := testutil.ToFloat64(svc.metrics.future); got != 12 {
		t.Errorf("future events: %v, want 12", got)
	}
	lines := logs.FilterMessageSnippet("ahead of the detector's clock")
	if lines.Len() != 2 {
		t.Fatalf("%d lines, want one per instance (2): %v", lines.Len(), lines.All())
	}
	for _, l := range lines.All() {
		if d, ok := l.ContextMap()["ahead"].(time.Duration); !ok || d < ahead.Sub(now) {
			t.Errorf("line %v: ahead %v, want at least %v", l.ContextMap()["instance"], l.ContextMap()["ahead"], ahead.Sub(now))
		}
	}
}

type failingWindows struct{ err error }

func (f failingWindows) Record(context.Context, abuse.WindowSpec, []abuse.Sighting) ([]abuse.Tally, error) {
	return nil, f.err
}

// A failure that may pass (the windows' store unreachable) is returned, so
// the consumer holds the offsets and retries the batch; the poison in a
// failed batch is counted when the batch is done, not on every attempt.
func TestHandleReturnsTransientFailures(t *testing.T) {
	now := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	down := errors.New("connection refused")
	w := &switchWindows{Windows: failingWindows{down}}
	svc, _, _ := testService(t, now, w)
	batch := append(scanMessages(0, 1, "192.0.2.1", now), message(1, []byte("{not json")))
	for range 3 {
		if err := svc.Handle(context.Background(), batch); !errors.Is(err, down) {
			t.Fatalf("Handle: %v, want the store's error", err)
		}
	}
	if n := testutil.ToFloat64(svc.metrics.failures); n != 3 {
		t.Errorf("batch failures: %v, want 3", n)
	}
	w.Windows = abusetest.NewMemoryWindows()
	if err := svc.Handle(context.Background(), batch); err != nil {
		t.Fatalf("Handle once the store is back: %v", err)
	}
	if n := testutil.ToFloat64(svc.metrics.undecodable); n != 1 {
		t.Errorf("undecodable events: %v after 3 failed attempts and a successful one, want 1", n)
	}
}

// switchWindows is Windows whose implementation a test can change.
type switchWindows struct{ abuse.Windows }
