package limiter

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// A leased rule that debits denied calls (debit: always, the default of
// descriptor rules) can be debited past its limit: a cost known after the
// response (the tokens an LLM call used) is counted whether it fits or
// not. Its calls are then refused, checks of cost 0 included, until the
// window frees enough; but the units other limiters hold in leases would
// still answer. So the limiter that sees Redis refuse such a call ends its
// own leases on the key at once (lease.Table.Revoke) and tells the others
// (LeaseNotices), who end theirs as they hear it. A notice can be lost:
// the leases of such rules answer only while Redis found the key within
// its limit in the last second (lease.Config.Revalidate), so none answers
// later than a second after the debit.

// LeaseNotices carries, between the limiters of a fleet, the state keys of
// leased rules found past their limit (redisfleet.LeaseNotices).
type LeaseNotices interface {
	// Publish tells the other limiters of keys.
	Publish(ctx context.Context, keys []string) error
	// Subscribe calls onKey with each key told, this limiter's own
	// included, until ctx ends; it runs on the caller's goroutine.
	Subscribe(ctx context.Context, onKey func(key string)) error
}

// maxNoticeKey bounds the state key a notice may carry; a rule's keys are
// far shorter (rules.maxSubject and the bounds of prefix and rule id).
const maxNoticeKey = 1024

// noticeOutcomes are the outcome labels of rate_limit_lease_notices_total.
var noticeOutcomes = []string{"sent", "failed", "dropped", "received", "refused"}

// noticeTimeout bounds a round trip publishing notices.
const noticeTimeout = time.Second

// revoke ends this limiter's leases on key, which Redis found past its
// limit, and queues the notice to the others, at most once a Revalidate.
func (s *Service) revoke(key string) {
	if !s.leases.Revoke(key, s.cfg.Now()) {
		return
	}
	s.leaseMetrics.revocations.Inc()
	if s.cfg.LeaseNotices == nil {
		return
	}
	select {
	case s.notices <- key:
	default: // the renewer is behind: the others' leases end within Revalidate
		s.leaseMetrics.notices.WithLabelValues("dropped").Inc()
	}
}

// tell publishes key, and the keys queued behind it, in one round trip.
func (s *Service) tell(key string) {
	keys := []string{key}
	for len(keys) < renewBatch && len(s.notices) > 0 {
		keys = append(keys, <-s.notices)
	}
	ctx, cancel := context.WithTimeout(context.Background(), noticeTimeout)
	defer cancel()
	if err := s.cfg.LeaseNotices.Publish(ctx, keys); err != nil {
		s.leaseMetrics.notices.WithLabelValues("failed").Add(float64(len(keys)))
		s.log.Debug("lease notices failed", zap.Int("keys", len(keys)), zap.Error(err))
		return
	}
	s.leaseMetrics.notices.WithLabelValues("sent").Add(float64(len(keys)))
}

// followNotices ends this limiter's leases on every key another limiter
// tells of, until ctx ends.
func (s *Service) followNotices(ctx context.Context) {
	err := s.cfg.LeaseNotices.Subscribe(ctx, func(key string) {
		if key == "" || len(key) > maxNoticeKey {
			s.leaseMetrics.notices.WithLabelValues("refused").Inc()
			return
		}
		s.leaseMetrics.notices.WithLabelValues("received").Inc()
		s.leases.Revoke(key, s.cfg.Now())
	})
	if err != nil && ctx.Err() == nil {
		s.log.Error("lease notices subscription ended; leases past their limit now end within a second only", zap.Error(err))
	}
}
