package archiver

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/event"
)

// refusingStore stands in for a database that refuses rows validation let
// through (a case real Postgres cannot be made to produce on demand): it
// refuses every violation whose endpoint is "/refused", the way
// pgstore.Store.Write reports it, storing nothing.
type refusingStore struct {
	written []Batch
	err     error
}

// ValidateViolation lets every row through: the refusals come from Write.
func (*refusingStore) ValidateViolation(Violation) error { return nil }

// ValidateBan lets every ban through.
func (*refusingStore) ValidateBan(event.Ban) error { return nil }

// ValidateOutcome lets every outcome through.
func (*refusingStore) ValidateOutcome(event.Outcome) error { return nil }

func (s *refusingStore) Write(_ context.Context, b Batch) (Result, error) {
	if s.err != nil {
		return Result{}, s.err
	}
	for i, v := range b.Violations {
		if v.Endpoint == "/refused" {
			return Result{}, &RowError{Table: ViolationsTable, Index: i, Err: errors.New("refused")}
		}
	}
	s.written = append(s.written, b)
	return Result{Violations: len(b.Violations), Bans: len(b.Bans), Outcomes: len(b.Outcomes), DeadLetters: len(b.DeadLetters)}, nil
}

func message(t *testing.T, endpoint string, allowed bool, offset int64) event.Message {
	t.Helper()
	ev := event.Decision{EventID: uuid.NewString(), TS: time.Now().UTC(), IP: "192.0.2.1", Endpoint: endpoint,
		Allowed: allowed, Reason: event.ReasonRateLimited}
	if allowed {
		ev.Reason = event.ReasonOK
	}
	return event.Message{Topic: "decisions", Offset: offset, Value: ev.AppendJSON(nil)}
}

func TestHandle(t *testing.T) {
	msgs := func(t *testing.T) []event.Message {
		return []event.Message{
			message(t, "/a", false, 1), message(t, "/refused", false, 2), message(t, "/b", true, 3),
			{Topic: "decisions", Offset: 4, Value: []byte("{oops")}, message(t, "/c", false, 5),
		}
	}
	t.Run("refused row becomes a dead letter, the rest is written once", func(t *testing.T) {
		store := &refusingStore{}
		svc := New(Config{DecisionsTopic: "decisions", BansTopic: "bans"}, store, zap.NewNop(), prometheus.NewRegistry())
		if err := svc.Handle(context.Background(), msgs(t)); err != nil {
			t.Fatal(err)
		}
		if len(store.written) != 1 {
			t.Fatalf("%d batches written, want 1", len(store.written))
		}
		b := store.written[0]
		if len(b.Violations) != 2 || len(b.DeadLetters) != 2 || b.DeadLetters[0].Offset != 2 || b.DeadLetters[1].Offset != 4 {
			t.Fatalf("batch: %d violations, dead letters %+v", len(b.Violations), b.DeadLetters)
		}
	})
	t.Run("a database error that is not about a row is returned, offsets held", func(t *testing.T) {
		store := &refusingStore{err: errors.New(`relation "rate_limit_violations" does not exist`)}
		svc := New(Config{DecisionsTopic: "decisions", BansTopic: "bans"}, store, zap.NewNop(), prometheus.NewRegistry())
		if err := svc.Handle(context.Background(), msgs(t)); err == nil {
			t.Fatal("error swallowed: the batch would be committed unarchived")
		}
	})
	t.Run("only allowed decisions: nothing to write", func(t *testing.T) {
		store := &refusingStore{}
		svc := New(Config{DecisionsTopic: "decisions", BansTopic: "bans"}, store, zap.NewNop(), prometheus.NewRegistry())
		if err := svc.Handle(context.Background(), []event.Message{message(t, "/x", true, 9)}); err != nil || len(store.written) != 0 {
			t.Fatalf("err %v, %d batches", err, len(store.written))
		}
	})
}

// outcomeMessage is an outcome on topic "outcomes" at offset.
func outcomeMessage(status int, offset int64) event.Message {
	o := event.Outcome{EventID: uuid.NewString(), TS: time.Now().UTC(), Instance: "limiter-1", IP: "192.0.2.1",
		Endpoint: "/api/login", Method: "POST", Status: status, Cost: 1}
	return event.Message{Topic: "outcomes", Offset: offset, Value: o.AppendJSON(nil)}
}

// Outcomes go to their table whatever their status; a message of the
// outcomes topic that is not a valid outcome is a dead letter, like a bad
// decision.
func TestHandleOutcomes(t *testing.T) {
	store := &refusingStore{}
	reg := prometheus.NewRegistry()
	svc := New(Config{DecisionsTopic: "decisions", BansTopic: "bans", OutcomesTopic: "outcomes"}, store, zap.NewNop(), reg)
	badStatus := event.Outcome{EventID: uuid.NewString(), TS: time.Now().UTC(), IP: "192.0.2.1", Endpoint: "/", Status: 700}
	msgs := []event.Message{
		outcomeMessage(200, 1),
		{Topic: "outcomes", Offset: 2, Value: []byte(`{"event_id":"x"}`)},
		{Topic: "outcomes", Offset: 3, Value: badStatus.AppendJSON(nil)},
		outcomeMessage(401, 4),
		message(t, "/a", false, 5), // another topic in the same batch
	}
	if err := svc.Handle(context.Background(), msgs); err != nil {
		t.Fatal(err)
	}
	if len(store.written) != 1 {
		t.Fatalf("%d batches written, want 1", len(store.written))
	}
	b := store.written[0]
	if len(b.Outcomes) != 2 || b.Outcomes[0].Status != 200 || b.Outcomes[1].Status != 401 {
		t.Errorf("outcomes written: %+v, want the 200 and the 401", b.Outcomes)
	}
	if len(b.Violations) != 1 {
		t.Errorf("%d violations written, want 1", len(b.Violations))
	}
	if len(b.DeadLetters) != 2 || b.DeadLetters[0].Offset != 2 || b.DeadLetters[1].Offset != 3 || b.DeadLetters[0].Topic != "outcomes" {
		t.Errorf("dead letters %+v, want offsets 2 and 3 of outcomes", b.DeadLetters)
	}
	if got := testutil.ToFloat64(svc.metrics.rows.WithLabelValues(OutcomesTable)); got != 2 {
		t.Errorf("rows inserted into outcomes: %v, want 2", got)
	}
}

// The rows of every table and the lag and buffer of every topic have a
// series at 0 before the first batch.
func TestSeriesStartAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	New(Config{DecisionsTopic: "decisions", BansTopic: "bans", OutcomesTopic: "outcomes"}, &refusingStore{}, zap.NewNop(), reg)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				got[f.GetName()] = append(got[f.GetName()], l.GetName()+"="+l.GetValue())
			}
		}
		slices.Sort(got[f.GetName()])
	}
	want := map[string][]string{
		"rate_limit_archiver_rows_inserted_total": {"table=bans", "table=dead_letters", "table=outcomes", "table=rate_limit_violations"},
		"rate_limit_archiver_consumer_lag":        {"topic=bans", "topic=decisions", "topic=outcomes"},
		"rate_limit_archiver_buffered_messages":   {"topic=bans", "topic=decisions", "topic=outcomes"},
	}
	for family, series := range want {
		if !slices.Equal(got[family], series) {
			t.Errorf("%s at start: %q, want %q", family, got[family], series)
		}
	}
}
