package archiver

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
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
	return Result{Violations: len(b.Violations), DeadLetters: len(b.DeadLetters)}, nil
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

// The rows of every table and the lag and buffer of both topics have a
// series at 0 before the first batch.
func TestSeriesStartAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	New(Config{DecisionsTopic: "decisions", BansTopic: "bans"}, &refusingStore{}, zap.NewNop(), reg)
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
		"rate_limit_archiver_rows_inserted_total": {"table=bans", "table=dead_letters", "table=rate_limit_violations"},
		"rate_limit_archiver_consumer_lag":        {"topic=bans", "topic=decisions"},
		"rate_limit_archiver_buffered_messages":   {"topic=bans", "topic=decisions"},
	}
	for family, series := range want {
		if !slices.Equal(got[family], series) {
			t.Errorf("%s at start: %q, want %q", family, got[family], series)
		}
	}
}
