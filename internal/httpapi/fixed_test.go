package httpapi_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/httpapi"
	"github.com/ratewarden/ratewarden/internal/limiter"
	"github.com/ratewarden/ratewarden/internal/rules"
)

// The limiter's decision service is what the API serves in production.
var _ httpapi.Limiter = (*limiter.Service)(nil)

// fixedLimiter is an httpapi.Limiter that allows every check and debits
// nothing for a report, each decision with an event id of its own, and
// counts what it is asked. The tests of what the API parses, refuses and
// how it shapes its answers run on it: they need no decision of substance,
// hence no Redis. Safe for concurrent use.
type fixedLimiter struct {
	rules *rules.Set
	// decided counts the checks and reports decided, one by one or in
	// batches.
	decided atomic.Int64
}

var _ httpapi.Limiter = (*fixedLimiter)(nil)

func (f *fixedLimiter) Check(_ context.Context, _ *rules.Request, d *limiter.Decision) { f.decide(d) }

func (f *fixedLimiter) CheckBatch(_ context.Context, reqs []rules.Request, b *limiter.Batch) {
	f.decideAll(len(reqs), b)
}

func (f *fixedLimiter) ReportHold(_ context.Context, _ *rules.Request, _ int, _ string, d *limiter.Decision) {
	f.decide(d)
}

func (f *fixedLimiter) ReportBatch(_ context.Context, reports []limiter.Report, b *limiter.Batch) {
	f.decideAll(len(reports), b)
}

func (f *fixedLimiter) Rules() *rules.Set { return f.rules }

// decide makes d an allowed decision that no rule applied to, as a
// limiter on Redis answers a request no rule matches.
func (f *fixedLimiter) decide(d *limiter.Decision) {
	d.Reset()
	n := f.decided.Add(1)
	d.Allowed, d.Reason, d.Mode = true, event.ReasonOK, limiter.ModeRedis
	d.EventID = "fixed-" + strconv.FormatInt(n, 10)
}

func (f *fixedLimiter) decideAll(n int, b *limiter.Batch) {
	b.Decisions = make([]limiter.Decision, n)
	for i := range b.Decisions {
		f.decide(&b.Decisions[i])
	}
}

// newFixedStack is newStack's decision API, served as newStack serves it,
// over a fixedLimiter with o.rules in force and o.configure applied; the
// other options, which are about Redis and Kafka, do not apply.
func newFixedStack(t testing.TB, o stackOptions) *stack {
	t.Helper()
	file, err := rules.Parse([]byte(o.rules))
	if err != nil {
		t.Fatalf("rules: %v", err)
	}
	set, err := rules.Compile(file, rules.Options{KeyPrefix: "fixed:"})
	if err != nil {
		t.Fatalf("rules: %v", err)
	}
	fixed := &fixedLimiter{rules: set}
	cfg := stackConfig{Config: httpapi.Config{Service: fixed}}
	if o.configure != nil {
		o.configure(&cfg)
	}
	s := serveStack(t, cfg, prometheus.NewRegistry())
	s.fixed = fixed
	return s
}
