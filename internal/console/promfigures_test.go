package console

import (
	"context"
	"errors"
	"testing"

	"github.com/ratewarden/ratewarden/internal/promquery"
)

// fakePrometheus answers each query from answers, or fails with err.
type fakePrometheus struct {
	answers map[string][]promquery.Sample
	err     error
}

func (f fakePrometheus) Query(_ context.Context, q string) ([]promquery.Sample, error) {
	return f.answers[q], f.err
}

func sample(label, value string, v float64) promquery.Sample {
	return promquery.Sample{Labels: map[string]string{label: value}, Value: v}
}

// Without Prometheus the figures are off; with one that fails, unavailable;
// with one that answers, rounded counts by rule and lag by source, a
// hostile value kept in range.
func TestPrometheusFigures(t *testing.T) {
	ctx := context.Background()
	off := New(Config{})
	if lag, st := off.detectorLag(ctx); lag != nil || st != promOff {
		t.Errorf("no Prometheus: lag %v, %s", lag, st)
	}
	if _, _, st := off.ruleCounts(ctx); st != promOff {
		t.Errorf("no Prometheus: counts %s", st)
	}

	down := New(Config{Prometheus: fakePrometheus{err: errors.New("connection refused")}})
	if lag, st := down.detectorLag(ctx); lag != nil || st != promUnavailable {
		t.Errorf("Prometheus down: lag %v, %s", lag, st)
	}
	if _, _, st := down.ruleCounts(ctx); st != promUnavailable {
		t.Errorf("Prometheus down: counts %s", st)
	}

	up := New(Config{Prometheus: fakePrometheus{answers: map[string][]promquery.Sample{
		hitsQuery:   {sample("rule", "login", 41.6), sample("rule", "api", 1e300)},
		deniedQuery: {sample("rule", "login", 9.4)},
		lagQuery:    {sample("source", "outcomes", 3), sample("source", "decisions", 120)},
	}}})
	hits, denied, st := up.ruleCounts(ctx)
	if st != promOK || count(hits["login"]) != 42 || count(denied["login"]) != 9 || count(hits["api"]) != 1e15 || count(denied["api"]) != 0 {
		t.Errorf("counts %s: hits %v, denied %v", st, hits, denied)
	}
	lag, st := up.detectorLag(ctx)
	if st != promOK || len(lag) != 2 || lag[0] != (sourceLag{"decisions", 120}) || lag[1] != (sourceLag{"outcomes", 3}) {
		t.Errorf("lag %s: %v", st, lag)
	}
}
