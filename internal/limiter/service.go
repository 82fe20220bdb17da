// Package limiter is the decision service: it matches a request to the rules
// (the rules file's, or descriptor rules for Envoy's rate limit API),
// decides every applicable rule in one Redis round trip or from a lease
// held in memory (package lease), applies each rule's failure policy when
// Redis cannot answer, debits the rules an outcome report spends, and hands
// one event per decision or report to the event bus without waiting for it. The Backend's breaker and a
// health checker drive its mode (redis, local, permissive; see
// modeMachine), so no request waits on a Redis that is known to be down.
package limiter

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/lease"
	"github.com/ratewarden/ratewarden/internal/rules"
)

// partialFailure is implemented by Decider errors that may concern part of
// Redis only, such as one Redis Cluster node failing while the others
// answer; PartialFailure reports whether that is the case.
type partialFailure interface{ PartialFailure() bool }

func isPartial(err error) bool {
	var p partialFailure
	return errors.As(err, &p) && p.PartialFailure()
}

// lateAnswers is implemented by Decider errors of submissions answered at
// the Decider's deadline while their round trip was still out
// (redisstore.LateError): when the reply comes, what Redis admitted for
// the calls from..to-1 is given back unless the request they decided was
// admitted. Calls never settled keep what Redis counted.
type lateAnswers interface {
	Settle(from, to int, admitted bool)
	// SettlePaid: the requests were served, paid for by a lease; what
	// Redis counted for the calls goes back whatever their rule.
	SettlePaid(from, to int)
}

// settleLate tells a late submission (err) what became of d, whose calls
// are its calls from off on: a check refused, its units go back; a report's
// debits stand. A call a lease answered instead (fallback) goes back even
// when the request was admitted: the lease's unit paid for it, and Redis's
// count of the call would pay a second time; so does a concurrency take.
func settleLate(err error, d *Decision, off int) {
	if err == nil || d.report { // before the interface, which escapes: a decision allocates nothing here
		return
	}
	var late lateAnswers
	if !errors.As(err, &late) {
		return
	}
	admitted := d.Allowed && !d.Unavailable
	if d.servedLate == 0 && d.holdID == "" {
		late.Settle(off, off+len(d.calls), admitted)
		return
	}
	j := off
	for i := range d.Applied {
		bit := uint64(1) << i // 0 from i = 64 on: neither cached nor served late
		switch {
		case d.cached&bit != 0:
			continue
		case admitted && d.servedLate&bit != 0:
			late.SettlePaid(j, j+1)
		case d.Applied[i].Call.Algorithm == decide.Concurrency:
			// A late take is never a hold the answer names: whatever the
			// request became, Redis's hold goes back (a release), or it
			// keeps a slot nobody can release until it lapses.
			late.Settle(j, j+1, false)
		default:
			late.Settle(j, j+1, admitted)
		}
		j++
	}
}

// Publisher hands an encoded event to the event bus. It must never block;
// it returns false when the event was dropped.
type Publisher interface {
	Publish(key, value []byte) bool
}

// Health checks Redis and learns the number of live limiter instances: one
// heartbeat round trip. It must honour ctx's deadline.
type Health interface {
	Beat(ctx context.Context, now time.Time) (live int, err error)
}

// Config holds the service's settings and injected dependencies.
type Config struct {
	// Instance names this limiter in events.
	Instance string
	// Bans, when set, denies banned client IPs and users before any rule.
	Bans *BanSet
	// Mode sets when the mode changes.
	Mode ModeConfig
	// PermissiveDenyRules lets rules whose failure policy is deny through in
	// permissive mode too; by default they keep answering 503.
	PermissiveDenyRules bool
	// OverLimitCacheSize bounds the entries of the over-limit cache (denials
	// answered from memory until they lapse); 0 turns it off.
	OverLimitCacheSize int
	// LocalMaxKeys bounds the keys of local-mode state (as many as Redis
	// would hold for the same calls); 0: 100 000.
	LocalMaxKeys int
	// Health, when set, is called every HealthInterval (default 5s), each
	// call bounded by HealthTimeout (default 50ms), by the goroutine Start
	// starts. Without it the mode never returns to redis once it left it.
	// Its errors are classed by the Backend's ErrorClass: it asks the same
	// Redis.
	Health         Health
	HealthInterval time.Duration
	HealthTimeout  time.Duration
	// Outcomes, when set, receives one event per outcome report (Report),
	// keyed by the client IP; it must never block, as Publisher.
	Outcomes Publisher
	// Lease sizes and bounds the leases of leased rules (package lease).
	Lease lease.Config
	// LeaseNotices, when set, tells the other limiters of the keys of leased
	// rules this one finds past their limit, and hears theirs, so that
	// every limiter ends its leases on such a key at once; without it they
	// end within Lease.Revalidate.
	LeaseNotices LeaseNotices
	// Now and NewEventID default to time.Now and random UUIDs.
	Now        func() time.Time
	NewEventID func() string
}

// Service makes decisions. It is safe for concurrent use; the rule set can
// be replaced at any time with SetRules.
type Service struct {
	cfg     Config
	rules   atomic.Pointer[ruleSet]
	backend Backend
	pub     Publisher
	local   *localLimiter
	over    *overLimitCache // nil: off
	metrics *metrics

	leases       *lease.Table
	leaseMetrics *leaseMetrics
	renewals     chan lease.Key     // keys whose lease runs low
	dropped      chan []decide.Call // leases of replaced rules, to give back
	notices      chan string        // keys found past their limit, to tell the other limiters
	stopRenewer  context.CancelFunc
	renewer      sync.WaitGroup
	log          *zap.Logger

	mode    atomic.Pointer[Mode] // the machine's mode, read on every decision
	live    atomic.Int64         // live limiter instances, last known
	fleet   fleet                // where live comes from (instances.go)
	mu      sync.Mutex           // guards machine
	machine *modeMachine

	stopHealth context.CancelFunc
	health     sync.WaitGroup
}

// ruleSet is a compiled rule set with the metric labels derived from it.
type ruleSet struct {
	*rules.Set
	tiers tierLabels
}

// New returns a Service deciding with backend under set. A nil set is a set
// without rules, until SetRules (a rule manager's first load).
func New(cfg Config, set *rules.Set, backend Backend, pub Publisher, log *zap.Logger, reg prometheus.Registerer) *Service {
	if set == nil {
		set, _ = rules.Compile(&rules.File{}, rules.Options{}) // an empty file always compiles
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.NewEventID == nil {
		cfg.NewEventID = new(v7Clock).newEventID
	}
	if cfg.HealthInterval <= 0 {
		cfg.HealthInterval = 5 * time.Second
	}
	if cfg.HealthTimeout <= 0 {
		cfg.HealthTimeout = 50 * time.Millisecond
	}
	if cfg.LocalMaxKeys <= 0 {
		cfg.LocalMaxKeys = defaultLocalMaxKeys
	}
	cfg.Lease = cfg.Lease.WithDefaults()
	s := &Service{cfg: cfg, backend: backend, pub: pub, local: newLocalLimiter(cfg.LocalMaxKeys),
		over: newOverLimitCache(cfg.OverLimitCacheSize), metrics: newMetrics(reg), log: log,
		machine: newModeMachine(cfg.Mode, cfg.Now()),
		leases:  lease.New(cfg.Lease), renewals: make(chan lease.Key, 1024), dropped: make(chan []decide.Call, 4),
		notices: make(chan string, 1024)}
	s.leaseMetrics = newLeaseMetrics(reg, s.leases)
	redis := ModeRedis
	s.mode.Store(&redis)
	s.live.Store(1)
	s.metrics.setMode(ModeRedis)
	s.metrics.initErrorClasses(backend.ErrorClasses())
	s.metrics.live.Set(1)
	s.metrics.watchOverLimit(reg, s.over)
	s.metrics.watchLocal(reg, s.local.mem)
	s.SetRules(set)
	return s
}

// SetRules atomically replaces the rule set; requests in flight finish with
// the set they started with. The leases and cached denials of the calls
// the new rules decide alike (rules.Set.Carry: same rule, same limits) stay;
// the others are given back or forgotten, so a limit raised admits at once.
// The decision series the new rules can produce start at 0.
func (s *Service) SetRules(set *rules.Set) {
	rs := &ruleSet{Set: set, tiers: tierLabels(set.Tiers())}
	s.metrics.initRules(set, rs.tiers)
	prev := s.rules.Swap(rs)
	if prev == nil {
		return
	}
	carry := set.Carry(prev.Set)
	kept, dropped := s.over.carry(carry)
	leases := s.dropLeases(func(state string, limits []decide.Limit) bool {
		_, ok := carry(state, limits)
		return ok
	})
	if kept+dropped+leases > 0 {
		s.log.Info("rules replaced", zap.Int("cached_denials_kept", kept), zap.Int("cached_denials_dropped", dropped),
			zap.Int("leases_given_back", leases))
	}
}

// Rules returns the rule set in force.
func (s *Service) Rules() *rules.Set { return s.rules.Load().Set }

// Check decides req into d (reset first) and publishes its event. req must
// be normalized (see httpapi); Cost must be at least 1.
func (s *Service) Check(ctx context.Context, req *rules.Request, d *Decision) {
	start := s.cfg.Now()
	set := s.rules.Load()
	if s.admit(set, req, d, s.Mode(), start) {
		s.decide(ctx, d, start)
		s.endHolds(ctx, d, start)
	}
	s.complete(set, req, d, start)
}

// admit resets d and answers it when no rule needs deciding: an exempt
// subject, a banned one, or none of set's rules applying. It reports
// whether d.Applied holds rules to decide.
func (s *Service) admit(set *ruleSet, req *rules.Request, d *Decision, mode Mode, now time.Time) bool {
	d.Reset()
	d.Mode = mode
	s.keyUser(set, req)
	// An exempt address or endpoint skips everything. An exemption by user
	// or tier skips the rules but never lifts a ban: the user id and tier
	// are the client's claim on a login route (the id it typed), and a
	// banned address naming an exempt account must stay banned.
	switch {
	case set.ExemptRequest(req):
		d.Allowed, d.Reason = true, event.ReasonExempt
	case s.banned(req, now, d): // d now holds the denial
	case set.ExemptUser(req):
		d.Allowed, d.Reason = true, event.ReasonExempt
	default:
		d.Applied = set.Match(req, now, d.Applied)
		if len(d.Applied) != 0 {
			nameHolds(d)
			return true
		}
		d.Allowed, d.Reason = true, event.ReasonNoRule
	}
	return false
}

// complete gives a decided d its event id and event, unless it could not be
// decided, and its metrics.
func (s *Service) complete(set *ruleSet, req *rules.Request, d *Decision, start time.Time) {
	if !d.Unavailable {
		d.EventID = s.cfg.NewEventID()
		s.publish(req, d, start)
	}
	s.metrics.observe(d, set.tiers.label(req.Tier), s.cfg.Now().Sub(start))
}

// keyUser finds the key of req's user once for the request
// (rules.Request.UserKey): rules, exemptions and bans know the account by
// it.
func (s *Service) keyUser(set *ruleSet, req *rules.Request) {
	req.UserKey = ""
	if req.UserID == "" {
		return
	}
	req.UserKey = set.UserKey(req.UserID)
	if req.UserKey != req.UserID {
		s.metrics.unfoldedUserIDs.Inc()
	}
}

// banned denies d when the client IP (for IPv6, any banned prefix holding
// it) or the user is on the blacklist; it costs a few map lookups, no round
// trip. req.UserKey must be set (keyUser).
func (s *Service) banned(req *rules.Request, now time.Time, d *Decision) bool {
	until, ok := s.addrBan(req, now)
	if !ok {
		until, ok = s.userBan(req, now)
	}
	if ok {
		d.Allowed, d.Reason, d.RetryAfter, d.ResetAfter = false, event.ReasonBanned, until.Sub(now), until.Sub(now)
	}
	return ok
}

// addrBan returns until when the client IP (for IPv6, any banned prefix
// holding it) is banned, if it is at now.
func (s *Service) addrBan(req *rules.Request, now time.Time) (time.Time, bool) {
	if s.cfg.Bans == nil {
		return time.Time{}, false
	}
	return s.cfg.Bans.BannedAddr(req.Addr, req.IP, now)
}

// userBan returns until when the request's user is banned, if it is at
// now: by a ban of its key (req.UserKey, set by keyUser: any spelling of
// the account), or of the id exactly as sent, a subject written while user
// ids were not folded.
func (s *Service) userBan(req *rules.Request, now time.Time) (time.Time, bool) {
	if s.cfg.Bans == nil || req.UserID == "" {
		return time.Time{}, false
	}
	until, ok := s.cfg.Bans.Banned(event.ScopeUser, req.UserKey, now)
	if !ok && req.UserKey != req.UserID {
		until, ok = s.cfg.Bans.Banned(event.ScopeUser, req.UserID, now)
	}
	return until, ok
}

// decide decides the applied rules: in Redis in redis mode, else (or when
// the round trip fails) by each rule's failure policy.
func (s *Service) decide(ctx context.Context, d *Decision, now time.Time) {
	if !s.prepare(d, now) {
		return
	}
	// A client that hangs up must not look like a Redis failure, so the
	// request's cancellation is not passed on; the Decider bounds its own
	// time (the coalescer's round-trip timeout, go-redis socket timeouts).
	d.detached = detachedContext{parent: ctx}
	d.callResults = append(d.callResults[:0], make([]decide.Result, len(d.calls))...)
	results, err := s.decideCalls(&d.detached, d.calls, d.callResults)
	d.detached = detachedContext{}
	s.settle(d, results, s.roundTrip(err), now)
	settleLate(err, d, 0)
	s.settleInMemory(ctx, d, now)
}

// prepare answers what of d needs no round trip: everything when not in
// redis mode (by the failure policies), the rules known to be over their
// limit (from the over-limit cache) and those that need no count. It leaves
// the calls that must go to Redis in d.calls and reports whether there are
// any; when there are none, d is decided.
func (s *Service) prepare(d *Decision, now time.Time) bool {
	if d.Mode != ModeRedis {
		s.finish(d, s.fallback(d, now, true))
		return false
	}
	hits := 0
	for i := range d.Applied {
		a := &d.Applied[i]
		if r, ok := answerWithoutRedis(a, now); ok { // at most 64 descriptors: i < 64
			d.cached |= 1 << i
			d.Results = append(d.Results, r)
			continue
		}
		if a.Call.Leased && i < 64 {
			if r, ok := s.fromLease(a, now); ok {
				d.cached |= 1 << i
				d.Results = append(d.Results, r)
				continue
			}
		}
		if r, ok := s.over.get(&a.Call, now); ok && i < 64 { // past 64 rules, always Redis
			d.cached |= 1 << i
			hits++
			d.Results = append(d.Results, r)
			continue
		}
		if a.Call.Leased {
			s.leases.Ask(&a.Call, now) // the round trip may as well bring a lease
		}
		d.Results = append(d.Results, decide.Result{})
		d.calls = append(d.calls, a.Call)
	}
	if hits != 0 {
		s.metrics.overLimitHits.Add(float64(hits))
	}
	if len(d.calls) == 0 {
		d.aggregate()
		return false
	}
	if d.holdID != "" {
		d.probeHoldsOfRefused()
	}
	return true
}

// roundTrip feeds the error metric, and the mode when the Decider's
// breaker is open, with the outcome of one round trip, whatever number of
// decisions shared it, and returns its error.
func (s *Service) roundTrip(err error) error {
	if err == nil {
		return nil
	}
	s.metrics.redisErrors.WithLabelValues(s.backend.ErrorClass(err)).Inc()
	// One cluster node down while the others answer: the decisions of this
	// round trip fall back, the keys of the other nodes stay exact in redis
	// mode.
	if !isPartial(err) && s.backend.BreakerOpen(err) && s.Mode() == ModeRedis {
		s.log.Warn("redis found down by the breaker", zap.Error(err))
		s.RedisDown("breaker opened")
	}
	return err
}

// settle decides d with the results of its calls (d.calls, prepared), or by
// the failure policies when their round trip failed with err.
func (s *Service) settle(d *Decision, results []decide.Result, err error, now time.Time) {
	s.settleLeases(d.calls, results, err, now)
	if err != nil {
		d.Mode = ModeLocal
		d.Results = d.Results[:0]
		unreached := s.backend.Unreached(err)
		if !unreached {
			s.metrics.unknownOutcomes.Inc()
		}
		s.finish(d, s.fallback(d, now, unreached))
		return
	}
	j := 0
	for i := range d.Applied {
		if d.cached&(1<<i) != 0 { // 0 from i = 64 on
			continue
		}
		d.Results[i] = results[j]
		d.tookHold(i, results[j], false)
		s.over.put(&d.Applied[i].Call, results[j], now)
		j++
	}
	d.aggregate()
}

// decideCalls decides calls with the Decider, into results (as long as
// calls) when the Decider can write into it.
func (s *Service) decideCalls(ctx context.Context, calls []decide.Call, results []decide.Result) ([]decide.Result, error) {
	into, ok := s.backend.(decidesInto)
	if !ok {
		return s.backend.Decide(ctx, calls)
	}
	return results, into.DecideInto(ctx, calls, results)
}

func (s *Service) finish(d *Decision, results []decide.Result) {
	if d.Unavailable {
		return
	}
	d.Results = append(d.Results, results...)
	d.aggregate()
}

// fallback decides without Redis in d.Mode, rule by rule, as each rule's
// on_redis_failure policy says. local: in-memory limiting with the limits
// divided among the live instances (permissive mode: allowed), when the
// calls were known not to reach Redis (unreached); when they may have (a
// round trip that timed out), refused; allow: allowed; deny: the whole
// request is refused with 503 unless the rule is in shadow mode (or
// permissive mode lets deny rules through).
func (s *Service) fallback(d *Decision, now time.Time, unreached bool) []decide.Result {
	results := make([]decide.Result, len(d.Applied))
	permissive := d.Mode == ModePermissive
	for i, a := range d.Applied {
		if r, ok := answerWithoutRedis(&a, now); ok {
			results[i] = r
			continue
		}
		// A lease in hand is spent first. When the call may have run
		// (!unreached), its late count goes back (settleLate), which
		// needs its bit: past 64 rules it is refused as local rules are.
		if a.Call.Leased && (unreached || i < 64) {
			if r, ok := s.fromLease(&a, now); ok {
				if !unreached {
					d.servedLate |= 1 << i
				}
				results[i] = r
				continue
			}
		}
		switch a.Rule.OnRedisFailure {
		case rules.FailDeny:
			if !a.Rule.Shadow && !(permissive && s.cfg.PermissiveDenyRules) {
				d.Unavailable, d.RuleID, d.Algorithm = true, a.Rule.ID, a.Rule.Algorithm
				return nil
			}
			results[i] = unlimited(a.Call)
		case rules.FailAllow:
			results[i] = unlimited(a.Call)
		default:
			switch {
			case permissive:
				results[i] = unlimited(a.Call)
			case !unreached:
				results[i] = refused(a.Call)
			default:
				results[i] = s.local.decide(a.Call, s.live.Load(), now)
				d.tookHold(i, results[i], true)
			}
		}
	}
	return results
}

// unlimited is the result of a rule let through without counting.
func unlimited(c decide.Call) decide.Result {
	q := c.Limits[0].Quota()
	return decide.Result{Allowed: true, Limit: q, Remaining: q}
}

// refusedRetry is the retry time of a refused call: the shortest a
// Retry-After header can say. The next round trip will likely answer.
const refusedRetry = time.Second

// refused is the result of a local rule's call whose round trip failed
// with its outcome unknown: Redis may have run it and counted it, so
// admitting it on the local budget as well could pass the limit while the
// other instances still count in Redis. Refusing it can only leave part of
// the limit unused, never exceed it.
func refused(c decide.Call) decide.Result {
	return decide.Result{Limit: c.Limits[0].Quota(), RetryAfter: refusedRetry, ResetAfter: refusedRetry}
}

func (s *Service) publish(req *rules.Request, d *Decision, now time.Time) {
	s.publishEvent(&event.Decision{UserID: req.UserID, IP: req.IP, Endpoint: req.Endpoint,
		Method: req.Method, Tier: req.Tier}, d, now)
}

// publishEvent completes ev, which holds what the request said, with the
// decision d and publishes it, keyed by its ip.
func (s *Service) publishEvent(ev *event.Decision, d *Decision, now time.Time) {
	ev.EventID = d.EventID
	ev.TS = now
	ev.Instance = s.cfg.Instance
	ev.RuleID = d.RuleID
	ev.Algorithm = string(d.Algorithm)
	ev.Allowed = d.Allowed
	ev.Reason = d.Reason
	ev.Limit = d.Limit
	ev.Remaining = d.Remaining
	ev.RetryAfterMS = d.RetryAfter.Milliseconds()
	ev.Mode = string(d.Mode)
	ev.Shadow = d.Shadow
	ev.Hold = d.Hold
	// The producer counts what it drops; a decision never waits for Kafka.
	// Key and value share one allocation: the producer owns both from here.
	size := len(ev.IP) + eventSize
	for _, desc := range ev.Descriptors {
		size += descriptorSize
		for _, e := range desc.Entries {
			size += entrySize + len(e.Key) + len(e.Value)
		}
	}
	buf := append(make([]byte, 0, size), ev.IP...)
	key := buf[:len(ev.IP):len(ev.IP)] // the value's appends cannot reach into it
	s.pub.Publish(key, ev.AppendJSON(buf[len(ev.IP):]))
}

// eventSize is room enough for a decision's event without descriptors,
// unless its strings are long; descriptorSize and entrySize are the room a
// descriptor and an entry take besides their keys and values, escapes
// aside. A larger event grows its buffer.
const (
	eventSize      = 512
	descriptorSize = 64
	entrySize      = 24
)
