// Package limiter is the decision service: it matches a request to the rules,
// decides every applicable rule in one Redis round trip, applies each rule's
// failure policy when Redis cannot answer, and hands one event per decision
// to the event bus without waiting for it.
package limiter

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/rules"
)

// Counter decides calls against shared state (Redis), all in one round trip.
// It must bound its own time: the context it gets carries no deadline.
type Counter interface {
	Decide(ctx context.Context, calls []decide.Call) ([]decide.Result, error)
}

// Publisher hands an encoded event to the event bus. It must never block;
// it returns false when the event was dropped.
type Publisher interface {
	Publish(key, value []byte) bool
}

// Config holds the service's settings and injected dependencies.
type Config struct {
	// Instance names this limiter in events.
	Instance string
	// ClassifyError maps a Counter error to a bounded metric label.
	ClassifyError func(error) string
	// Bans, when set, denies banned client IPs and users before any rule.
	Bans *BanSet
	// Now and NewEventID default to time.Now and random UUIDs.
	Now        func() time.Time
	NewEventID func() string
}

// Service makes decisions. It is safe for concurrent use; the rule set can
// be replaced at any time with SetRules.
type Service struct {
	cfg     Config
	rules   atomic.Pointer[ruleSet]
	counter Counter
	pub     Publisher
	local   *localLimiter
	metrics *metrics
	log     *zap.Logger
}

// ruleSet is a compiled rule set with the metric labels derived from it.
type ruleSet struct {
	*rules.Set
	tiers tierLabels
}

// New returns a Service deciding with counter under set.
func New(cfg Config, set *rules.Set, counter Counter, pub Publisher, log *zap.Logger, reg prometheus.Registerer) *Service {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.NewEventID == nil {
		cfg.NewEventID = newEventID
	}
	if cfg.ClassifyError == nil {
		cfg.ClassifyError = func(error) string { return "other" }
	}
	s := &Service{cfg: cfg, counter: counter, pub: pub, local: newLocalLimiter(), metrics: newMetrics(reg), log: log}
	s.SetRules(set)
	return s
}

// SetRules atomically replaces the rule set; requests in flight finish with
// the set they started with.
func (s *Service) SetRules(set *rules.Set) {
	s.rules.Store(&ruleSet{Set: set, tiers: newTierLabels(set.Tiers())})
}

// Rules returns the rule set in force.
func (s *Service) Rules() *rules.Set { return s.rules.Load().Set }

// Check decides req into d (reset first) and publishes its event. req must
// be normalized (see httpapi); Cost must be at least 1.
func (s *Service) Check(ctx context.Context, req *rules.Request, d *Decision) {
	start := s.cfg.Now()
	d.Reset()
	d.Mode = ModeRedis
	set := s.rules.Load()
	switch {
	case set.Exempt(req):
		d.Allowed, d.Reason = true, event.ReasonExempt
	case s.banned(req, start, d): // d now holds the denial
	default:
		d.Applied = set.Match(req, start, d.Applied)
		if len(d.Applied) == 0 {
			d.Allowed, d.Reason = true, event.ReasonNoRule
		} else {
			s.decide(ctx, d, start)
		}
	}
	if !d.Unavailable {
		d.EventID = s.cfg.NewEventID()
		s.publish(req, d, start)
	}
	s.metrics.observe(d, set.tiers.label(req.Tier), s.cfg.Now().Sub(start))
}

// banned denies d when the client IP or the user is on the blacklist; it
// costs two map lookups, no round trip.
func (s *Service) banned(req *rules.Request, now time.Time, d *Decision) bool {
	if s.cfg.Bans == nil {
		return false
	}
	until, ok := s.cfg.Bans.Banned(event.ScopeIP, req.IP, now)
	if !ok && req.UserID != "" {
		until, ok = s.cfg.Bans.Banned(event.ScopeUser, req.UserID, now)
	}
	if ok {
		d.Allowed, d.Reason, d.RetryAfter, d.ResetAfter = false, event.ReasonBanned, until.Sub(now), until.Sub(now)
	}
	return ok
}

func (s *Service) decide(ctx context.Context, d *Decision, now time.Time) {
	for _, a := range d.Applied {
		d.calls = append(d.calls, a.Call)
	}
	// A client that hangs up must not look like a Redis failure, so the
	// request's cancellation is not passed on; the Counter bounds its own
	// time (the coalescer's round-trip timeout, go-redis socket timeouts).
	results, err := s.counter.Decide(context.WithoutCancel(ctx), d.calls)
	if err != nil {
		s.metrics.redisErrors.WithLabelValues(s.cfg.ClassifyError(err)).Inc()
		s.log.Warn("redis decision failed, applying failure policies", zap.Error(err))
		results = s.fallback(d, now)
		if d.Unavailable {
			return
		}
	}
	d.Results = append(d.Results, results...)
	d.aggregate()
}

// fallback decides without Redis, rule by rule, as each rule's
// on_redis_failure policy says: local (in-memory limiting), allow, or deny
// (the whole request is refused with 503 unless the rule is in shadow mode).
func (s *Service) fallback(d *Decision, now time.Time) []decide.Result {
	results := make([]decide.Result, len(d.Applied))
	d.Mode = ModePermissive
	for i, a := range d.Applied {
		switch a.Rule.OnRedisFailure {
		case rules.FailDeny:
			if !a.Rule.Shadow {
				d.Unavailable, d.RuleID, d.Algorithm = true, a.Rule.ID, a.Rule.Algorithm
				return nil
			}
			results[i] = unlimited(a.Call)
		case rules.FailAllow:
			results[i] = unlimited(a.Call)
		default:
			d.Mode = ModeLocal
			results[i] = s.local.decide(a.Call, now)
		}
	}
	return results
}

// unlimited is the result of a rule let through without counting.
func unlimited(c decide.Call) decide.Result {
	q := c.Limits[0].Quota()
	return decide.Result{Allowed: true, Limit: q, Remaining: q}
}

func (s *Service) publish(req *rules.Request, d *Decision, now time.Time) {
	ev := event.Decision{
		EventID:      d.EventID,
		TS:           now,
		Instance:     s.cfg.Instance,
		UserID:       req.UserID,
		IP:           req.IP,
		Endpoint:     req.Endpoint,
		Method:       req.Method,
		Tier:         req.Tier,
		RuleID:       d.RuleID,
		Algorithm:    string(d.Algorithm),
		Allowed:      d.Allowed,
		Reason:       d.Reason,
		Limit:        d.Limit,
		Remaining:    d.Remaining,
		RetryAfterMS: d.RetryAfter.Milliseconds(),
		Mode:         d.Mode,
		Shadow:       d.Shadow,
	}
	// The producer counts what it drops; a decision never waits for Kafka.
	s.pub.Publish([]byte(req.IP), ev.AppendJSON(make([]byte, 0, 512)))
}
