package detector

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/abuse"
	"github.com/ratewarden/ratewarden/internal/event"
)

// What the decision and the outcome services both report of a batch: what
// they issued, the messages they skipped, the clocks ahead of theirs.

// logIssued logs each ban and warning published.
func logIssued(log *zap.Logger, issued []abuse.Claimed) {
	for _, o := range issued {
		b := o.Ban
		log.Info("issued", zap.String("action", b.Action), zap.String("scope", b.Scope), zap.String("subject", b.Subject),
			zap.String("reason", b.Reason), zap.Int64("count", b.Count), zap.Int64("duration_s", b.DurationS),
			zap.Bool("dry_run", b.DryRun), zap.String("ban_id", b.BanID))
	}
}

// skipCounters count the messages a service can never process: by the
// field at fault, or undecodable.
type skipCounters struct {
	invalid     *prometheus.CounterVec
	undecodable prometheus.Counter
}

// skipMessage counts a message that can never be processed (what names
// it: "decision event", "outcome"), and logs it at most once per interval
// and kind (the field at fault, or undecodable).
func skipMessage(log *zap.Logger, throttle *logThrottle, c skipCounters, what string, m event.Message, err error) {
	kind := "undecodable"
	var fe *event.FieldError
	if errors.As(err, &fe) {
		kind = fe.Field
		c.invalid.WithLabelValues(fe.Field).Inc()
	} else {
		c.undecodable.Inc()
	}
	if ok, suppressed := throttle.allow("skip/"+kind, time.Now()); ok {
		log.Warn(what+" skipped: it can never be processed", zap.String("kind", kind), zap.String("topic", m.Topic),
			zap.Int("partition", m.Partition), zap.Int64("offset", m.Offset), zap.Error(err), zap.Int("suppressed", suppressed))
	}
}

// logAhead logs, at most once per interval and instance, that an instance
// stamps events (what: "decision events", "outcomes") beyond the tolerated
// skew ahead of the detector's clock.
func logAhead(log *zap.Logger, throttle *logThrottle, what string, ahead map[string]time.Duration, skew time.Duration) {
	for instance, d := range ahead {
		if ok, suppressed := throttle.allow("ahead/"+instance, time.Now()); ok {
			log.Warn(what+" ahead of the detector's clock, decided at its time",
				zap.String("instance", instance), zap.Duration("ahead", d), zap.Duration("max_clock_skew", skew),
				zap.Int("suppressed", suppressed))
		}
	}
}
