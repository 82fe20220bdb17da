package limiter

import (
	"context"
	"math"
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/rules"
)

// CheckDescriptors decides a request of Envoy's rate limit API into d
// (reset first) and publishes its event: one decision for all its
// descriptors, with the engine of Check (over-limit cache, one coalesced
// round trip, failure policies, bans). Each descriptor a rule matched has
// an entry of d.Applied (Applied.Descriptor names it) and its result at the
// same index of d.Results; a descriptor without one is OK. A banned client
// address denies every descriptor (d.Reason banned, nothing applied); an
// exempt address or endpoint admits every one (d.Reason exempt).
// req must be within the bounds of event (the API checks them).
//
// The descriptors of concurrency rules take holds as a check's do, all
// named by one id that d.Hold answers when the request is admitted (the
// holds of a refused one are given back at once); the releases among them
// (rules.ReleaseKey, Envoy's stream-done call) end a hold each, whatever
// the rest of the request: a banned or exempt address releases nothing,
// its request-time call having taken nothing either. Likewise the
// descriptors of rules that reserve take a reservation under that id at
// request time (hits_addend 0), and the stream-done descriptors naming it
// settle it (see rules' descriptorreserve.go).
func (s *Service) CheckDescriptors(ctx context.Context, req *rules.DescriptorRequest, d *Decision) {
	start := s.cfg.Now()
	d.Reset()
	d.Mode = s.Mode()
	set := s.rules.Load()
	subject := rules.Request{IP: req.IP, Addr: req.Addr, Endpoint: req.Endpoint}
	switch {
	case set.ExemptRequest(&subject): // by address when there is one, by endpoint in any case
		d.Allowed, d.Reason = true, event.ReasonExempt
	case req.IP != "" && s.banned(&subject, start, d): // d now holds the denial
	default:
		d.Applied = set.MatchDescriptors(req, start, d.Applied)
		if len(d.Applied) == 0 {
			d.Allowed, d.Reason = true, event.ReasonNoRule
		} else {
			nameHolds(d)
			s.decide(ctx, d, start)
			s.endHolds(ctx, d, start)
			s.countReleases(d)
			s.countSettles(d)
		}
	}
	if !d.Unavailable {
		d.EventID = s.cfg.NewEventID()
		s.publishDescriptors(req, d, start)
	}
	s.metrics.observe(d, set.tiers.label(""), s.cfg.Now().Sub(start))
}

// answerWithoutRedis returns the result of a call that needs no count: an
// unlimited descriptor rule (admitted, MaxUint32 remaining, as
// envoyproxy/ratelimit answers), one of 0 requests (denied until its
// window ends), or a release its rule does not accept (admitted, nothing
// released).
func answerWithoutRedis(a *rules.Applied, now time.Time) (decide.Result, bool) {
	switch {
	case a.Rule.Descriptor == nil:
		return decide.Result{}, false
	case a.NoRelease: // a release the rule does not accept: nothing to end
		return decide.Result{Allowed: true, Limit: a.Call.Limits[0].Requests}, true
	case a.Rule.Descriptor.Unlimited:
		return decide.Result{Allowed: true, LimitIndex: -1, Remaining: math.MaxUint32}, true
	case a.Rule.Blocks():
		per := a.Call.Limits[0].Per
		left := per - time.Duration(now.UnixNano())%per
		return decide.Result{ResetAfter: left, RetryAfter: left}, true
	}
	return decide.Result{}, false
}

// publishDescriptors publishes the event of a rate limit API decision: the
// client address (or, without one, the unspecified address), the domain,
// and each descriptor with the rule that decided it and its code.
//
// The event's descriptors are built in slices the decision keeps: the event
// is encoded before publishEvent returns, and nothing holds them after.
func (s *Service) publishDescriptors(req *rules.DescriptorRequest, d *Decision, now time.Time) {
	n := 0
	for _, desc := range req.Descriptors {
		n += len(desc.Entries)
	}
	descs := append(d.eventDescs[:0], make([]event.Descriptor, len(req.Descriptors))...)
	all := append(d.eventEntries[:0], make([]event.Entry, n)...)
	d.eventDescs, d.eventEntries = descs, all
	defer func() { clear(descs); clear(all) }() // no request strings kept in the pool
	rest := all
	for i, desc := range req.Descriptors {
		entries := rest[:len(desc.Entries):len(desc.Entries)]
		rest = rest[len(desc.Entries):]
		for j, e := range desc.Entries {
			entries[j] = event.Entry{Key: e.Key, Value: e.Value}
		}
		descs[i] = event.Descriptor{Entries: entries, Code: event.CodeOK}
	}
	if d.Reason == event.ReasonBanned {
		for i := range descs {
			descs[i].Code = event.CodeOverLimit
		}
	}
	for i, a := range d.Applied {
		desc := &descs[a.Descriptor]
		desc.RuleID = a.Rule.ID
		if !d.Results[i].Allowed && !a.Rule.Shadow {
			desc.Code = event.CodeOverLimit
		}
	}
	ip := req.IP
	if ip == "" {
		ip = unknownAddr
	}
	s.publishEvent(&event.Decision{IP: ip, Endpoint: req.Endpoint, Method: req.Method,
		Domain: req.Domain, Descriptors: descs}, d, now)
}

// unknownAddr is the ip of the events of rate limit API requests without a
// client address: the unspecified address, which no client has.
const unknownAddr = "0.0.0.0"
