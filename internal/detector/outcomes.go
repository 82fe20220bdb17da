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

// OutcomeDecoder turns one message into an outcome, or says why it never
// can (an error wrapping a *event.FieldError names the field at fault). It
// is what makes the outcome path pluggable: DecodeOutcomeMessage for
// ratelimit.outcomes, or a parser of gateway access logs that yields
// outcomes with deterministic event ids.
type OutcomeDecoder func(event.Message) (event.Outcome, error)

// DecodeOutcomeMessage decodes a ratelimit.outcomes message.
func DecodeOutcomeMessage(m event.Message) (event.Outcome, error) {
	return event.DecodeOutcome(m.Value)
}

// OutcomesGroupSuffix is appended to the detector's consumer group (the
// decisions') to name the group of the outcomes consumer. A group of its
// own keeps the two loops apart: members of one group share its
// generations, so a member joining or leaving either loop would stop both
// while the group rebalances, and kafka-go assigns a reader only the topic
// it reads. Offsets are per topic and group, so the decisions' offsets
// are untouched by the outcomes' and the other way round.
const OutcomesGroupSuffix = "-outcomes"

// OutcomeService handles batches of outcome messages: it decodes them,
// skips and counts what can never be processed, and hands the rest to the
// outcome engine, which claims, publishes and settles what they trigger.
type OutcomeService struct {
	engine   *abuse.OutcomeEngine
	decode   OutcomeDecoder
	banTopic string // see CheckBans
	markBans func(ctx context.Context, outs []*event.Outcome) error
	metrics  *outcomeMetrics
	log      *zap.Logger
	throttle *logThrottle
}

// NewOutcomes returns an OutcomeService decoding messages with decode (nil:
// DecodeOutcomeMessage). Its ban and warning counts start at 0 for every
// reason the enabled scenarios can produce, its invalid-outcome counts for
// every field.
func NewOutcomes(engine *abuse.OutcomeEngine, decode OutcomeDecoder, log *zap.Logger, reg prometheus.Registerer) *OutcomeService {
	if decode == nil {
		decode = DecodeOutcomeMessage
	}
	m := newOutcomeMetrics(reg)
	for _, r := range engine.BanReasons() {
		m.bans.WithLabelValues(r)
	}
	for _, r := range engine.WarnReasons() {
		m.warnings.WithLabelValues(r)
	}
	for _, f := range event.InvalidOutcomeFields() {
		m.invalid.WithLabelValues(f)
	}
	return &OutcomeService{engine: engine, decode: decode, metrics: m, log: log, throttle: newLogThrottle(logInterval, logKeys)}
}

// CheckBans makes the service look up, before detection, whether the
// failure outcomes read from topic had their client address or their user
// banned at their time: mark sets Outcome.Banned or Outcome.UserBanned on
// those that had, in one round trip for the batch. It is for sources that
// cannot say so themselves: a gateway's access log records the ban's own
// refusals (403) as failures, which would otherwise feed a new ban as soon
// as the first lapsed. An error of mark fails the batch, which is
// delivered again.
func (s *OutcomeService) CheckBans(topic string, mark func(ctx context.Context, outs []*event.Outcome) error) {
	s.banTopic, s.markBans = topic, mark
}

// Handle processes one batch, as Service.Handle does: an error (Redis or
// Kafka unreachable) leaves the batch to be delivered again, and every step
// is idempotent; a message that is no valid outcome is counted and skipped,
// so it never wedges the consumer.
func (s *OutcomeService) Handle(ctx context.Context, msgs []event.Message) error {
	err := s.handle(ctx, msgs)
	if err != nil {
		s.metrics.failures.Inc()
	}
	return err
}

func (s *OutcomeService) handle(ctx context.Context, msgs []event.Message) error {
	start := time.Now()
	in := make([]abuse.OutcomeInput, 0, len(msgs))
	var rejected []rejection
	for _, m := range msgs {
		o, err := s.decode(m)
		if err != nil {
			rejected = append(rejected, rejection{m, err})
			continue
		}
		in = append(in, abuse.OutcomeInput{Topic: m.Topic, Partition: m.Partition, Outcome: o})
	}
	if err := s.checkBans(ctx, in); err != nil {
		return err
	}
	outcomes, st, err := s.engine.Process(ctx, in)
	if err != nil {
		return fmt.Errorf("detect outcomes: %w", err)
	}
	logIssued(s.log, outcomes)
	// Counted once the batch is done, so a retried batch counts them once.
	for _, r := range rejected {
		skipMessage(s.log, s.throttle, skipCounters{s.metrics.invalid, s.metrics.undecodable}, "outcome", r.msg, r.err)
	}
	logAhead(s.log, s.throttle, "outcomes", st.Ahead, s.engine.MaxClockSkew())
	s.metrics.observe(st, time.Since(start))
	return nil
}

// checkBans marks the failures of the ban-checked topic whose address or
// user was banned (see CheckBans).
func (s *OutcomeService) checkBans(ctx context.Context, in []abuse.OutcomeInput) error {
	if s.markBans == nil {
		return nil
	}
	var check []*event.Outcome
	for i := range in {
		if o := &in[i].Outcome; in[i].Topic == s.banTopic && o.Status >= 400 && !o.Banned && !o.UserBanned {
			check = append(check, o)
		}
	}
	if len(check) == 0 {
		return nil
	}
	if err := s.markBans(ctx, check); err != nil {
		return fmt.Errorf("check bans: %w", err)
	}
	return nil
}

// ReportStats returns the reporter of the lag of the consumer of topic
// (the outcomes', or a gateway access log's).
func (s *OutcomeService) ReportStats(topic string) func(lag, buffered int64) {
	g := s.metrics.lag.WithLabelValues(topic)
	return func(lag, _ int64) { g.Set(float64(lag)) }
}

type outcomeMetrics struct {
	outcomes, failuresSeen, late, skipped, undecodable, future, failures prometheus.Counter
	invalid, bans, warnings                                              *prometheus.CounterVec
	duration                                                             prometheus.Histogram
	lag                                                                  *prometheus.GaugeVec
	// Account attack's owner recognition.
	successes, spared prometheus.Counter
	heldAccounts      prometheus.Counter
}

func newOutcomeMetrics(reg prometheus.Registerer) *outcomeMetrics {
	f := promauto.With(reg)
	counter := func(name, help string) prometheus.Counter {
		return f.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	return &outcomeMetrics{
		outcomes:     counter("rate_limit_detector_outcomes_total", "Outcomes consumed."),
		failuresSeen: counter("rate_limit_detector_outcome_failures_total", "Outcomes with a failure status of some scenario, tallied."),
		late:         counter("rate_limit_detector_late_outcomes_total", "Outcomes older than the grace behind the newest of their partition, ignored."),
		skipped:      counter("rate_limit_detector_skipped_outcomes_total", "Failure outcomes that never count: banned or exempt clients, no client address."),
		undecodable:  counter("rate_limit_detector_undecodable_outcomes_total", "Messages of the outcomes topic that are not outcomes."),
		future: counter("rate_limit_detector_future_outcomes_total",
			"Outcomes stamped more than detection.max_clock_skew ahead of the detector's clock, decided at its time."),
		failures: counter("rate_limit_detector_outcome_batch_failures_total",
			"Outcome batches that failed (Redis or Kafka unreachable), retried with their offsets held."),
		invalid: f.NewCounterVec(prometheus.CounterOpts{Name: "rate_limit_detector_invalid_outcomes_total",
			Help: "Outcomes outside the limiter's bounds, skipped, by the field at fault."}, []string{"field"}),
		bans: f.NewCounterVec(prometheus.CounterOpts{Name: "rate_limit_detector_outcome_bans_total",
			Help: "Bans issued from outcomes, by scenario."}, []string{"reason"}),
		warnings: f.NewCounterVec(prometheus.CounterOpts{Name: "rate_limit_detector_outcome_warnings_total",
			Help: "Warnings issued from outcomes (account attacks), by scenario."}, []string{"reason"}),
		duration: f.NewHistogram(prometheus.HistogramOpts{Name: "rate_limit_detector_outcome_batch_duration_seconds",
			Help: "Time to process one batch of outcomes.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		lag: f.NewGaugeVec(prometheus.GaugeOpts{Name: "rate_limit_detector_outcomes_consumer_lag",
			Help: "Messages behind the end of the outcomes topic, or of a gateway access-log topic."}, []string{"topic"}),
		successes: counter("rate_limit_detector_outcome_successes_total",
			"Outcomes with a success status of account_attack, recorded to recognize an account's owner (one per user, source and batch)."),
		spared: counter("rate_limit_detector_outcome_spared_total",
			"Sources account_attack did not ban because they succeeded on the account within its window (its owner's)."),
		heldAccounts: counter("rate_limit_detector_held_account_outcomes_total",
			"Failure outcomes on a banned (locked) or exempt account, tallied for their source but not for the account."),
	}
}

func (m *outcomeMetrics) observe(s abuse.Stats, took time.Duration) {
	m.outcomes.Add(float64(s.Consumed))
	m.failuresSeen.Add(float64(s.Failures))
	m.late.Add(float64(s.Late))
	m.skipped.Add(float64(s.Skipped))
	m.heldAccounts.Add(float64(s.HeldAccounts))
	m.future.Add(float64(s.Future))
	for reason, n := range s.Bans {
		m.bans.WithLabelValues(reason).Add(float64(n))
	}
	for reason, n := range s.Warnings {
		m.warnings.WithLabelValues(reason).Add(float64(n))
	}
	m.successes.Add(float64(s.Successes))
	m.spared.Add(float64(s.Spared))
	m.duration.Observe(took.Seconds())
}
