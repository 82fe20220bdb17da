package limiter

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/lease"
	"github.com/ratewarden/ratewarden/internal/rules"
)

// Leased rules (rules.Rule.Lease) answer a hot key's requests from a lease
// on its budget held in memory (package lease): a request takes units from
// it without a round trip. A request the lease cannot serve goes to Redis
// as today, asking for a new lease on the way when the key is hot. A
// background renewer asks for more units before the lease runs out, and
// gives back the leases of idle and evicted keys; Stop gives back every
// lease. Leases are taken whatever the mode: a lease in hand is spent while
// Redis is down, then the rule's on_redis_failure applies.

// renewBatch is the most renewals one round trip carries.
const renewBatch = 128

type leaseMetrics struct {
	decisions   prometheus.Counter
	granted     prometheus.Counter
	returned    prometheus.Counter
	failures    prometheus.Counter
	revocations prometheus.Counter
	notices     *prometheus.CounterVec // by outcome
}

func newLeaseMetrics(reg prometheus.Registerer, t *lease.Table) *leaseMetrics {
	f := promauto.With(reg)
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "rate_limit_lease_keys",
		Help: "Keys of leased rules this limiter tracks (bounded by LEASE_MAX_KEYS), with a lease or only their recent rate.",
	}, func() float64 { keys, _ := t.Stats(); return float64(keys) })
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "rate_limit_lease_units",
		Help: "Units this limiter holds in leases, unspent.",
	}, func() float64 { _, units := t.Stats(); return float64(units) })
	m := &leaseMetrics{
		decisions: f.NewCounter(prometheus.CounterOpts{
			Name: "rate_limit_lease_decisions_total",
			Help: "Rule decisions answered from a lease held in memory, without a Redis round trip.",
		}),
		granted: f.NewCounter(prometheus.CounterOpts{
			Name: "rate_limit_lease_units_granted_total",
			Help: "Units Redis lent this limiter.",
		}),
		returned: f.NewCounter(prometheus.CounterOpts{
			Name: "rate_limit_lease_units_returned_total",
			Help: "Units this limiter gave back unspent (idle or evicted keys, leases of rules a rules change altered, shutdown).",
		}),
		failures: f.NewCounter(prometheus.CounterOpts{
			Name: "rate_limit_lease_failures_total",
			Help: "Lease round trips (renewals, give-backs) that failed; a failed give-back strands its units until the lease's window or slot ends.",
		}),
		revocations: f.NewCounter(prometheus.CounterOpts{
			Name: "rate_limit_lease_revocations_total",
			Help: "Keys of leased rules this limiter found past their limit (a debit passed it) and ended its leases on, at most once a second per key.",
		}),
		notices: f.NewCounterVec(prometheus.CounterOpts{
			Name: "rate_limit_lease_notices_total",
			Help: "Notices of leased keys found past their limit, by outcome: sent to the other limiters, failed or dropped (the queue was full) on the way, received, refused (malformed).",
		}, []string{"outcome"}),
	}
	for _, o := range noticeOutcomes {
		m.notices.WithLabelValues(o)
	}
	return m
}

// fromLease answers a's call from its key's lease when it can.
func (s *Service) fromLease(a *rules.Applied, now time.Time) (decide.Result, bool) {
	c := &a.Call
	r, ok, renew := s.leases.Take(c, a.Rule.LeaseMax(c.Limits), now)
	if ok {
		s.leaseMetrics.decisions.Inc()
		if renew {
			select {
			case s.renewals <- lease.KeyOf(c):
			default: // the renewer is behind: the next hit asks again
			}
		}
	}
	return r, ok
}

// settleLeases hands Redis's answers to the calls that carry a lease
// request (lease.Table.Ask, Renewal) to the table, or their failure, and
// ends the leases of the keys Redis found past their limit.
func (s *Service) settleLeases(calls []decide.Call, results []decide.Result, err error, sent time.Time) {
	for i := range calls {
		c := &calls[i]
		if c.Lease == (decide.Lease{}) {
			continue
		}
		if err != nil {
			s.leases.Failed(c, s.cfg.Now())
			continue
		}
		s.leases.Settle(c, results[i], sent)
		s.leaseMetrics.granted.Add(float64(results[i].Granted))
	}
	for i := range calls {
		if c := &calls[i]; err == nil && c.Leased && c.DebitDenied && !results[i].Allowed {
			s.revoke(c.Keys.State)
		}
	}
}

// runLeases renews leases running low as Take reports them, gives back
// those of idle, evicted and revoked keys every Idle/2 and those SetRules
// dropped, and tells the other limiters of keys found past their limit,
// until ctx ends; then it gives back every lease.
func (s *Service) runLeases(ctx context.Context) {
	sweep := time.NewTicker(s.cfg.Lease.Idle / 2)
	defer sweep.Stop()
	keys := make([]lease.Key, 0, renewBatch)
	for {
		select {
		case <-ctx.Done():
			if failed := s.giveBack(s.leases.Sweep(s.cfg.Now(), true)); failed > 0 {
				// Not retried: a give-back that ran but answered late would
				// be applied twice. The units stay debited until their window
				// ends: the keys admit less meanwhile, never more.
				s.log.Warn("leases not given back at stop", zap.Int64("units", failed))
			}
			return
		case <-sweep.C:
			s.giveBack(s.leases.Sweep(s.cfg.Now(), false))
		case calls := <-s.dropped:
			s.giveBack(calls)
		case key := <-s.notices:
			s.tell(key)
		case key := <-s.renewals:
			keys = append(keys[:0], key)
			for len(keys) < renewBatch && len(s.renewals) > 0 {
				keys = append(keys, <-s.renewals)
			}
			s.renew(keys)
		}
	}
}

// renew asks Redis for more units of the leases of keys, in one round trip.
func (s *Service) renew(keys []lease.Key) {
	now := s.cfg.Now()
	calls := make([]decide.Call, 0, len(keys))
	for _, k := range keys {
		if c, ok := s.leases.Renewal(k, now); ok {
			calls = append(calls, c)
		}
	}
	if len(calls) == 0 {
		return
	}
	results, err := s.backend.Decide(context.Background(), calls)
	if err != nil {
		s.leaseMetrics.failures.Inc()
		s.log.Debug("lease renewal failed", zap.Int("keys", len(calls)), zap.Error(err))
	}
	s.settleLeases(calls, results, err, now)
	var late lateAnswers
	if errors.As(err, &late) {
		late.Settle(0, len(calls), false) // the leases it may have granted were never taken
	}
}

// dropLeases gives back, through the renewer, the leases whose terms the
// rules changed (keep says which stay) and returns how many. Without a
// renewer, or when it is behind, the units stay stranded until their
// window or slot ends.
func (s *Service) dropLeases(keep func(state string, limits []decide.Limit) bool) int {
	calls := s.leases.Drop(s.cfg.Now(), keep)
	if len(calls) > 0 {
		select {
		case s.dropped <- calls:
		default:
			s.log.Warn("leases of the previous rules stranded: the renewer is behind", zap.Int("keys", len(calls)))
		}
	}
	return len(calls)
}

// startLeases starts the renewer, and the follower of the other limiters'
// notices; stopLeases stops them, once the renewer gave back every lease.
func (s *Service) startLeases() {
	ctx, cancel := context.WithCancel(context.Background())
	s.stopRenewer = cancel
	s.renewer.Go(func() { s.runLeases(ctx) })
	if s.cfg.LeaseNotices != nil {
		s.renewer.Go(func() { s.followNotices(ctx) })
	}
}

func (s *Service) stopLeases() {
	if s.stopRenewer != nil {
		s.stopRenewer()
	}
	s.renewer.Wait()
}

// giveBack sends calls giving back leases, in round trips of renewBatch,
// and returns the units of those whose round trip failed.
func (s *Service) giveBack(calls []decide.Call) (failed int64) {
	for len(calls) > 0 {
		n := min(len(calls), renewBatch)
		if _, err := s.backend.Decide(context.Background(), calls[:n]); err != nil {
			s.leaseMetrics.failures.Inc()
			s.log.Debug("lease give-back failed", zap.Int("keys", n), zap.Error(err))
			for i := range calls[:n] {
				failed += calls[i].Lease.Unspent
			}
		} else {
			for i := range calls[:n] {
				s.leaseMetrics.returned.Add(float64(calls[i].Lease.Unspent))
			}
		}
		calls = calls[n:]
	}
	return failed
}
