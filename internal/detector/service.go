// Package detector is the detector service core: for each source it
// consumes (the decisions, the outcome reports, a gateway's access log) it
// decodes a batch of messages, skips and counts what can never be
// processed, and hands the rest to the source's detection engine, which
// claims, publishes and settles the bans and warnings they trigger, in that
// order, so a crash at any point repeats work but loses none. One Service
// runs every source through the same steps, and its metrics carry the
// source's name as their source label.
package detector

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/abuse"
	"github.com/ratewarden/ratewarden/internal/event"
)

// The names of the sources the detector consumes, as its metrics label them.
const (
	SourceDecisions = "decisions"
	SourceOutcomes  = "outcomes"
	SourceAccessLog = "access_log"
)

// Source is one topic the detector consumes: its messages, read in consumer
// group Group, go through Pipeline.
type Source struct {
	// Name labels the source's metrics (source="decisions") and logs.
	Name  string
	Topic string
	Group string
	// Pipeline decodes the source's messages and detects (DecisionPipeline,
	// OutcomePipeline).
	Pipeline Pipeline
}

// Pipeline is what a source's batch goes through: decoding, then its
// detection engine.
type Pipeline interface {
	// detect decodes msgs and processes the valid ones; it returns what was
	// issued, the engine's stats and the messages it rejected.
	detect(ctx context.Context, msgs []event.Message) ([]abuse.Claimed, abuse.Stats, []rejection, error)
	// what names one message and many in logs ("decision event",
	// "decision events").
	what() (one, many string)
	maxClockSkew() time.Duration
	// banReasons, warnReasons and invalidFields are the label values that
	// start at 0.
	banReasons() []string
	warnReasons() []string
	invalidFields() []string
	// outcomes reports whether the outcome counts (failures, successes,
	// spared sources, held accounts) apply.
	outcomes() bool
}

// Service handles the batches of every source the detector consumes.
type Service struct {
	consumers []*Consumer
}

// Consumer is one source's part of the service: what its consumer loop
// calls.
type Consumer struct {
	src     Source
	metrics *sourceMetrics
	log     *zap.Logger
	// throttle keeps the lines about bad messages (by kind) and about
	// clocks ahead (by instance) to one per logInterval each.
	throttle *logThrottle
}

// logInterval is how often at most one kind of bad message, or one
// instance's clock ahead, is logged per source; logKeys bounds the kinds
// and instances tracked (beyond them, they share one line).
const (
	logInterval = time.Minute
	logKeys     = 1000
)

// New returns a Service for sources, whose names must be distinct and not
// empty. Every series of a source starts at 0: its ban and warning counts
// for every reason its engine's detection settings can produce, its
// invalid-message counts for every field.
func New(log *zap.Logger, reg prometheus.Registerer, sources ...Source) (*Service, error) {
	m := newMetrics(reg)
	s := &Service{}
	seen := map[string]bool{}
	for _, src := range sources {
		switch {
		case src.Name == "":
			return nil, fmt.Errorf("detector: a source without a name (topic %q)", src.Topic)
		case seen[src.Name]:
			return nil, fmt.Errorf("detector: source %q given twice", src.Name)
		case src.Pipeline == nil:
			return nil, fmt.Errorf("detector: source %q has no pipeline", src.Name)
		}
		seen[src.Name] = true
		s.consumers = append(s.consumers, &Consumer{src: src, metrics: m.of(src), log: log.With(zap.String("source", src.Name)),
			throttle: newLogThrottle(logInterval, logKeys)})
	}
	return s, nil
}

// Consumers returns the sources' parts, in the order given to New.
func (s *Service) Consumers() []*Consumer { return s.consumers }

// Source returns the consumer's source.
func (c *Consumer) Source() Source { return c.src }

// Handle processes one batch of the source. An error leaves the batch to be
// delivered again: every step is idempotent (windows and sets keyed by
// event id, bans by their ledger record and id). Only a failure that may
// pass is returned (Redis or Kafka unreachable), and counted: a message
// that can never be processed, because it is not a valid message of the
// source within the limiter's bounds, is skipped and counted here, so it
// never wedges the consumer, and whatever a valid one leads to (windows,
// claims, a ban message of bounded size) is within what Redis and Kafka
// accept.
func (c *Consumer) Handle(ctx context.Context, msgs []event.Message) error {
	err := c.handle(ctx, msgs)
	if err != nil {
		c.metrics.failures.Inc()
	}
	return err
}

func (c *Consumer) handle(ctx context.Context, msgs []event.Message) error {
	start := time.Now()
	issued, stats, rejected, err := c.src.Pipeline.detect(ctx, msgs)
	if err != nil {
		return err
	}
	logIssued(c.log, issued)
	// Counted once the batch is done: a batch retried while Redis is down
	// must not count its rejected messages again on every attempt.
	one, many := c.src.Pipeline.what()
	for _, r := range rejected {
		skipMessage(c.log, c.throttle, skipCounters{c.metrics.invalid, c.metrics.undecodable}, one, r.msg, r.err)
	}
	logAhead(c.log, c.throttle, many, stats.Ahead, c.src.Pipeline.maxClockSkew())
	c.metrics.observe(stats, time.Since(start))
	return nil
}

// ReportStats reports the consumer lag (the buffer fill is not exported).
func (c *Consumer) ReportStats(lag, _ int64) { c.metrics.lag.Set(float64(lag)) }

// rejection is a message that is no valid message of its source, and why.
type rejection struct {
	msg event.Message
	err error
}

// DecisionPipeline returns the pipeline of the decisions topic: decision
// events, detected by engine. A message that is no decision event within
// the limiter's bounds stays in the topic (and the archiver dead-letters
// it); detection cannot use it, now or on any retry.
func DecisionPipeline(engine *abuse.Engine) Pipeline { return decisionPipeline{engine} }

type decisionPipeline struct{ engine *abuse.Engine }

func (p decisionPipeline) detect(ctx context.Context, msgs []event.Message) ([]abuse.Claimed, abuse.Stats, []rejection, error) {
	in := make([]abuse.Input, 0, len(msgs))
	var rejected []rejection
	for _, m := range msgs {
		ev, err := event.DecodeDecision(m.Value)
		if err != nil {
			rejected = append(rejected, rejection{m, err})
			continue
		}
		in = append(in, abuse.Input{Partition: m.Partition, Event: ev})
	}
	issued, st, err := p.engine.Process(ctx, in)
	if err != nil {
		return nil, abuse.Stats{}, nil, fmt.Errorf("detect: %w", err)
	}
	return issued, st, rejected, nil
}

func (decisionPipeline) what() (string, string)        { return "decision event", "decision events" }
func (p decisionPipeline) maxClockSkew() time.Duration { return p.engine.MaxClockSkew() }
func (p decisionPipeline) banReasons() []string        { return p.engine.BanReasons() }
func (p decisionPipeline) warnReasons() []string       { return p.engine.WarnReasons() }
func (decisionPipeline) invalidFields() []string       { return event.InvalidFields() }
func (decisionPipeline) outcomes() bool                { return false }

// metrics are the detector's families, labelled by source.
type metrics struct {
	events, late, skipped, undecodable, future, failures *prometheus.CounterVec
	invalid, bans, warnings                              *prometheus.CounterVec
	duration                                             *prometheus.HistogramVec
	lag                                                  *prometheus.GaugeVec
	// Outcome sources only.
	outcomeFailures, successes, spared, heldAccounts *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		events: f.NewCounterVec(prometheus.CounterOpts{Name: "rate_limit_detector_events_total",
			Help: "Messages consumed and decoded (decision events, outcomes), by source."}, []string{"source"}),
		late: f.NewCounterVec(prometheus.CounterOpts{Name: "rate_limit_detector_late_events_total",
			Help: "Events older than the grace behind the newest of their partition, ignored, by source."}, []string{"source"}),
		skipped: f.NewCounterVec(prometheus.CounterOpts{Name: "rate_limit_detector_skipped_events_total",
			Help: "Events that never count (bans' own denials, banned or exempt clients, no client address), by source."}, []string{"source"}),
		undecodable: f.NewCounterVec(prometheus.CounterOpts{Name: "rate_limit_detector_undecodable_events_total",
			Help: "Messages that are no event of their source, by source."}, []string{"source"}),
		invalid: f.NewCounterVec(prometheus.CounterOpts{Name: "rate_limit_detector_invalid_events_total",
			Help: "Events outside the limiter's bounds, skipped, by source and the field at fault."}, []string{"source", "field"}),
		future: f.NewCounterVec(prometheus.CounterOpts{Name: "rate_limit_detector_future_events_total",
			Help: "Events stamped more than detection.max_clock_skew ahead of the detector's clock, decided at its time, by source."}, []string{"source"}),
		failures: f.NewCounterVec(prometheus.CounterOpts{Name: "rate_limit_detector_batch_failures_total",
			Help: "Batches that failed (Redis or Kafka unreachable), retried with their offsets held, by source."}, []string{"source"}),
		bans: f.NewCounterVec(prometheus.CounterOpts{Name: "rate_limit_detector_bans_total",
			Help: "Bans issued, by source and detection rule."}, []string{"source", "reason"}),
		warnings: f.NewCounterVec(prometheus.CounterOpts{Name: "rate_limit_detector_warnings_total",
			Help: "Warnings issued, by source and detection rule."}, []string{"source", "reason"}),
		duration: f.NewHistogramVec(prometheus.HistogramOpts{Name: "rate_limit_detector_batch_duration_seconds",
			Help: "Time to process one batch, by source.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}, []string{"source"}),
		lag: f.NewGaugeVec(prometheus.GaugeOpts{Name: "rate_limit_detector_consumer_lag",
			Help: "Messages behind the end of the source's topic."}, []string{"source"}),
		outcomeFailures: f.NewCounterVec(prometheus.CounterOpts{Name: "rate_limit_detector_outcome_failures_total",
			Help: "Outcomes with a failure status of some scenario, tallied, by source."}, []string{"source"}),
		successes: f.NewCounterVec(prometheus.CounterOpts{Name: "rate_limit_detector_outcome_successes_total",
			Help: "Outcomes with a success status of account_attack, recorded to recognize an account's owner (one per user, source and batch), by source."}, []string{"source"}),
		spared: f.NewCounterVec(prometheus.CounterOpts{Name: "rate_limit_detector_outcome_spared_total",
			Help: "Sources account_attack did not ban because they succeeded on the account within its window (its owner's), by source."}, []string{"source"}),
		heldAccounts: f.NewCounterVec(prometheus.CounterOpts{Name: "rate_limit_detector_held_account_outcomes_total",
			Help: "Failure outcomes on a banned (locked) or exempt account, tallied for their source but not for the account, by source."}, []string{"source"}),
	}
}

// sourceMetrics are the series of one source.
type sourceMetrics struct {
	events, late, skipped, undecodable, future, failures prometheus.Counter
	invalid, bans, warnings                              *prometheus.CounterVec // by field, by reason
	duration                                             prometheus.Observer
	lag                                                  prometheus.Gauge
	// Nil unless the source's pipeline is an outcome pipeline.
	outcomeFailures, successes, spared, heldAccounts prometheus.Counter
}

// of returns src's series, each started at 0 (the reasons and fields its
// pipeline can produce too), so dashboards and alerts read 0 rather than
// nothing before the first batch.
func (m *metrics) of(src Source) *sourceMetrics {
	l := prometheus.Labels{"source": src.Name}
	s := &sourceMetrics{
		events: m.events.With(l), late: m.late.With(l), skipped: m.skipped.With(l), undecodable: m.undecodable.With(l),
		future: m.future.With(l), failures: m.failures.With(l),
		invalid: m.invalid.MustCurryWith(l), bans: m.bans.MustCurryWith(l), warnings: m.warnings.MustCurryWith(l),
		duration: m.duration.With(l), lag: m.lag.With(l),
	}
	if src.Pipeline.outcomes() {
		s.outcomeFailures, s.successes, s.spared, s.heldAccounts = m.outcomeFailures.With(l), m.successes.With(l), m.spared.With(l), m.heldAccounts.With(l)
	}
	for _, r := range src.Pipeline.banReasons() {
		s.bans.WithLabelValues(r)
	}
	for _, r := range src.Pipeline.warnReasons() {
		s.warnings.WithLabelValues(r)
	}
	for _, f := range src.Pipeline.invalidFields() {
		s.invalid.WithLabelValues(f)
	}
	return s
}

func (m *sourceMetrics) observe(s abuse.Stats, took time.Duration) {
	m.events.Add(float64(s.Consumed))
	m.late.Add(float64(s.Late))
	m.skipped.Add(float64(s.Skipped))
	m.future.Add(float64(s.Future))
	for reason, n := range s.Bans {
		m.bans.WithLabelValues(reason).Add(float64(n))
	}
	for reason, n := range s.Warnings {
		m.warnings.WithLabelValues(reason).Add(float64(n))
	}
	if m.outcomeFailures != nil {
		m.outcomeFailures.Add(float64(s.Failures))
		m.heldAccounts.Add(float64(s.HeldAccounts))
		m.successes.Add(float64(s.Successes))
		m.spared.Add(float64(s.Spared))
	}
	m.duration.Observe(took.Seconds())
}
