package rlsapi

import (
	"math"
	"math/bits"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/limiter"
	"github.com/ratewarden/ratewarden/internal/rules"
)

// Codes, shorter.
const (
	codeOK        = rlsv3.RateLimitResponse_OK
	codeOverLimit = rlsv3.RateLimitResponse_OVER_LIMIT
)

// answer builds the response to req from the decision d: one status per
// descriptor, in order, and the overall code, their logical OR.
//
//   - A descriptor no rule matched is OK without a current limit.
//   - An unlimited rule's is OK with limit_remaining MaxUint32 and no current
//     limit, as envoyproxy/ratelimit answers.
//   - Another rule's is OVER_LIMIT when the rule denied and is not in shadow
//     mode (a shadow rule answers OK even over its limit), with the rule's
//     binding limit as current_limit (see currentLimit), the units left of
//     it, and the time until it is fully replenished.
//   - A banned client address makes every descriptor OVER_LIMIT, without a
//     current limit, with the time until the ban ends.
//   - An admitted request that took holds (concurrency rules) answers
//     their id in dynamic_metadata, under HoldMetadataKey: Envoy keeps it
//     in the stream's dynamic metadata (namespace
//     envoy.filters.http.ratelimit), where the stream-done call's metadata
//     action reads it into its hold entry. A refused request answers none,
//     so its stream-done call sends no release.
func (s *Server) answer(req *rules.DescriptorRequest, d *limiter.Decision) *rlsv3.RateLimitResponse {
	m := newMessages(len(req.Descriptors))
	resp := m.resp
	resp.OverallCode = codeOK
	for i := range m.statuses {
		m.statuses[i].Code = codeOK
		resp.Statuses[i] = &m.statuses[i]
	}
	if d.Reason == event.ReasonBanned {
		resp.OverallCode = codeOverLimit
		for i, st := range resp.Statuses {
			st.Code = codeOverLimit
			st.DurationUntilReset = setDuration(&m.resets[i], d.ResetAfter)
		}
		return resp
	}
	header := -1 // the status the response headers describe
	for i := range d.Applied {
		a, r := &d.Applied[i], &d.Results[i]
		st := resp.Statuses[a.Descriptor]
		if a.Rule.Descriptor.Unlimited {
			st.LimitRemaining = math.MaxUint32
			continue
		}
		if !r.Allowed && !a.Rule.Shadow {
			st.Code = codeOverLimit
			resp.OverallCode = codeOverLimit
		}
		st.CurrentLimit = currentLimit(&m.limits[a.Descriptor], a, r)
		st.LimitRemaining = clampUint32(r.Remaining)
		st.DurationUntilReset = setDuration(&m.resets[a.Descriptor], r.ResetAfter)
		if !a.Rule.Shadow && (header < 0 || headerFirst(st, resp.Statuses[header])) {
			header = a.Descriptor
		}
	}
	if s.cfg.ResponseHeaders && header >= 0 {
		resp.ResponseHeadersToAdd = s.headers(resp.Statuses[header])
	}
	if d.Hold != "" {
		resp.DynamicMetadata = &structpb.Struct{Fields: map[string]*structpb.Value{
			HoldMetadataKey: structpb.NewStringValue(d.Hold)}}
	}
	return resp
}

// HoldMetadataKey is the key of the hold id in an answer's
// dynamic_metadata.
const HoldMetadataKey = "hold"

// messages are the messages of one response, allocated together: the
// response, its statuses, and each status's current limit and time until
// reset (at most one of each per descriptor: a descriptor is decided by one
// rule). gRPC marshals the response after the handler returned, so they
// cannot be reused, but they need not be allocated one by one.
type messages struct {
	resp     *rlsv3.RateLimitResponse
	statuses []rlsv3.RateLimitResponse_DescriptorStatus
	limits   []rlsv3.RateLimitResponse_RateLimit
	resets   []durationpb.Duration
}

// oneDescriptor holds the messages of the answer to one descriptor, the
// usual request (Envoy sends one call per descriptor list).
type oneDescriptor struct {
	resp     rlsv3.RateLimitResponse
	statuses [1]*rlsv3.RateLimitResponse_DescriptorStatus
	status   [1]rlsv3.RateLimitResponse_DescriptorStatus
	limit    [1]rlsv3.RateLimitResponse_RateLimit
	reset    [1]durationpb.Duration
}

// newMessages returns the messages of the answer to n descriptors: in one
// allocation for one descriptor, in five for more.
func newMessages(n int) messages {
	if n == 1 {
		o := new(oneDescriptor)
		o.resp.Statuses = o.statuses[:]
		return messages{resp: &o.resp, statuses: o.status[:], limits: o.limit[:], resets: o.reset[:]}
	}
	return messages{
		resp:     &rlsv3.RateLimitResponse{Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, n)},
		statuses: make([]rlsv3.RateLimitResponse_DescriptorStatus, n),
		limits:   make([]rlsv3.RateLimitResponse_RateLimit, n),
		resets:   make([]durationpb.Duration, n),
	}
}

// setDuration sets dst to d as durationpb.New would make it and returns it.
func setDuration(dst *durationpb.Duration, d time.Duration) *durationpb.Duration {
	nanos := d.Nanoseconds()
	secs := nanos / 1e9
	dst.Seconds, dst.Nanos = secs, int32(nanos-secs*1e9)
	return dst
}

// headerFirst reports whether status a rather than b should be described by
// the response headers: the fewest remaining, then the longest reset.
func headerFirst(a, b *rlsv3.RateLimitResponse_DescriptorStatus) bool {
	if a.LimitRemaining != b.LimitRemaining {
		return a.LimitRemaining < b.LimitRemaining
	}
	return a.DurationUntilReset.AsDuration() > b.DurationUntilReset.AsDuration()
}

// headers returns envoyproxy/ratelimit's response headers for st: its
// requests per unit, the units left and the seconds until reset, rounded
// up (a client that waits that long finds the limit replenished).
// Shadow rules never show in them, as in the HTTP API's headers: they must
// not change what clients do.
func (s *Server) headers(st *rlsv3.RateLimitResponse_DescriptorStatus) []*corev3.HeaderValue {
	reset := st.DurationUntilReset.AsDuration()
	secs := int64(reset / time.Second)
	if reset%time.Second > 0 {
		secs++
	}
	return []*corev3.HeaderValue{
		{Key: s.cfg.LimitHeader, Value: strconv.FormatUint(uint64(st.CurrentLimit.RequestsPerUnit), 10)},
		{Key: s.cfg.RemainingHeader, Value: strconv.FormatUint(uint64(st.LimitRemaining), 10)},
		{Key: s.cfg.ResetHeader, Value: strconv.FormatInt(secs, 10)},
	}
}

// currentLimit sets dst to a rule's limit as Envoy's API describes limits
// and returns it: the binding limit of the result (the first limit when a
// penalty or an escalation held the key and no limit was binding), named by
// the rule's rate limit name. A token bucket is described by its refill
// rate; a concurrency limit by the requests it admits in flight, in unit
// UNKNOWN: it is no rate, and its hold lifetime no window.
func currentLimit(dst *rlsv3.RateLimitResponse_RateLimit, a *rules.Applied, r *decide.Result) *rlsv3.RateLimitResponse_RateLimit {
	ls := a.Call.Limits
	l := ls[0]
	dst.Name = a.Rule.Descriptor.Name
	if a.Rule.Algorithm == decide.Concurrency {
		dst.RequestsPerUnit, dst.Unit = clampUint32(l.Requests), rlsv3.RateLimitResponse_RateLimit_UNKNOWN
		return dst
	}
	if r.LimitIndex > 0 && r.LimitIndex < len(ls) {
		l = ls[r.LimitIndex]
	}
	n := l.Requests
	if a.Rule.Algorithm == decide.TokenBucket {
		n = l.Rate
	}
	dst.RequestsPerUnit, dst.Unit = perUnit(n, l.Per)
	return dst
}

// units are the time units of Envoy's API, shortest first; a month is 30
// days and a year 365, as envoyproxy/ratelimit counts them.
var units = [...]struct {
	unit rlsv3.RateLimitResponse_RateLimit_Unit
	d    time.Duration
}{
	{rlsv3.RateLimitResponse_RateLimit_SECOND, time.Second},
	{rlsv3.RateLimitResponse_RateLimit_MINUTE, time.Minute},
	{rlsv3.RateLimitResponse_RateLimit_HOUR, time.Hour},
	{rlsv3.RateLimitResponse_RateLimit_DAY, 24 * time.Hour},
	{rlsv3.RateLimitResponse_RateLimit_WEEK, 7 * 24 * time.Hour},
	{rlsv3.RateLimitResponse_RateLimit_MONTH, 30 * 24 * time.Hour},
	{rlsv3.RateLimitResponse_RateLimit_YEAR, 365 * 24 * time.Hour},
}

// unitDurations are the windows of a descriptor's limit (the units of
// envoy.type.v3, as units counts them); UNKNOWN has none.
var unitDurations = map[typev3.RateLimitUnit]time.Duration{
	typev3.RateLimitUnit_SECOND: time.Second,
	typev3.RateLimitUnit_MINUTE: time.Minute,
	typev3.RateLimitUnit_HOUR:   time.Hour,
	typev3.RateLimitUnit_DAY:    24 * time.Hour,
	typev3.RateLimitUnit_MONTH:  30 * 24 * time.Hour,
	typev3.RateLimitUnit_YEAR:   365 * 24 * time.Hour,
}

// perUnit describes n requests per per in one of Envoy's units, which
// rules need not use (100 per 10m, 5 per 90s). It keeps the rate exact
// whenever a unit allows it, since Envoy's x-ratelimit headers and
// dashboards read requests_per_unit per unit:
//  1. the unit equal to per, with n;
//  2. else the largest unit shorter than per in which the rate is a whole
//     number (100 per 10m: 10 per MINUTE), a smaller burst than the rule
//     allows rather than a larger one;
//  3. else the shortest unit longer than per in which it is (5 per 90s:
//     200 per HOUR);
//  4. else the shortest unit longer than per (YEAR past a year), the rate
//     rounded down but at least 1 when n is (1 per 11s: 5 per MINUTE).
//
// requests_per_unit is clamped to MaxUint32.
func perUnit(n int64, per time.Duration) (uint32, rlsv3.RateLimitResponse_RateLimit_Unit) {
	if per <= 0 || n < 0 { // refused by the rules' validation
		return 0, rlsv3.RateLimitResponse_RateLimit_UNKNOWN
	}
	for _, u := range units {
		if u.d == per {
			return clampUint32(n), u.unit
		}
	}
	for i := len(units) - 1; i >= 0; i-- {
		if u := units[i]; u.d < per {
			if q, exact := scale(n, u.d, per); exact {
				return q, u.unit
			}
		}
	}
	for _, u := range units {
		if u.d > per {
			if q, exact := scale(n, u.d, per); exact {
				return q, u.unit
			}
		}
	}
	u := units[len(units)-1]
	for _, c := range units {
		if c.d > per {
			u = c
			break
		}
	}
	q, _ := scale(n, u.d, per)
	if q == 0 && n > 0 {
		q = 1
	}
	return q, u.unit
}

// scale returns n·unit/per, clamped to MaxUint32 and rounded down, and
// whether it is exact; the product is 128 bits wide, so it never overflows.
func scale(n int64, unit, per time.Duration) (uint32, bool) {
	hi, lo := bits.Mul64(uint64(n), uint64(unit))
	if hi >= uint64(per) { // the quotient needs more than 64 bits
		return math.MaxUint32, false
	}
	q, rem := bits.Div64(hi, lo, uint64(per))
	if q > math.MaxUint32 {
		return math.MaxUint32, false
	}
	return uint32(q), rem == 0
}

func clampUint32(v int64) uint32 {
	switch {
	case v <= 0:
		return 0
	case v >= math.MaxUint32:
		return math.MaxUint32
	}
	return uint32(v)
}
