package rules

import (
	"net/netip"
	"strings"
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/ipprefix"
)

// Request is what rules match and key on. The caller normalizes it: IP is
// the string form of Addr, Endpoint is endpoint.Normalize's result.
type Request struct {
	UserID, IP, Endpoint, Method, Tier string
	Addr                               netip.Addr
	Attributes                         map[string]string
	Cost                               int64
	// Reserve, when above 0, is the check's own estimate of its cost,
	// reserved instead of the rule's on the rules that reserve
	// (Rule.Reserve).
	Reserve int64

	// UserKey, when set, is the key of UserID (Set.UserKey of the set
	// deciding it), found once for the request: folding an id beyond ASCII
	// costs microseconds. Empty: the set finds it where it needs it.
	UserKey string
}

// Applied is one rule that applies to a request, with its call ready to
// decide.
type Applied struct {
	Rule *Rule
	Call decide.Call
	// Descriptor is the index of the request descriptor a descriptor rule
	// matched (MatchDescriptors); 0 for other rules.
	Descriptor int
	// NoRelease marks a release (Call.Release) the rule does not accept: a
	// stream-done call naming no hold id, of a rule that releases holds by
	// id only. It releases nothing and needs no Redis.
	NoRelease bool
	// Debit marks the call of a descriptor rule that reserves which debits
	// its cost rather than take a reservation: a descriptor with a
	// hits_addend above 0 and no hold entry (see descriptorreserve.go). A
	// settle naming no hold id is marked NoRelease: it settles nothing.
	Debit bool
}

// Exempt reports whether the request is exempt, by its user (ExemptUser)
// or whoever its user (ExemptRequest).
func (s *Set) Exempt(r *Request) bool { return s.ExemptUser(r) || s.ExemptRequest(r) }

// ExemptRequest reports whether the request is exempt whoever its user:
// its address is in an exempt prefix or its endpoint matches an exempt
// pattern.
func (s *Set) ExemptRequest(r *Request) bool {
	e := &s.exempt
	if len(e.prefixes) > 0 {
		a := r.Addr
		if !a.IsValid() {
			a, _ = netip.ParseAddr(r.IP)
		}
		a = ipprefix.Client(a)
		for _, p := range e.prefixes {
			if p.Contains(a) {
				return true
			}
		}
	}
	for i := range e.endpoints {
		if e.endpoints[i].Match(r.Endpoint) {
			return true
		}
	}
	return false
}

// ExemptUser reports whether the request's user is exempt: by its tier
// (case-insensitive) or its user id. An outcome report on such an account
// still counts against its client address (see the limiter's Report).
func (s *Set) ExemptUser(r *Request) bool {
	e := &s.exempt
	if r.Tier != "" && containsFold(e.tiers, r.Tier) {
		return true
	}
	if r.UserID != "" && len(e.users) > 0 {
		if _, ok := e.users[s.userKeyOf(r)]; ok {
			return true
		}
	}
	return false
}

// userKeyOf returns r's UserKey, or finds it.
func (s *Set) userKeyOf(r *Request) string {
	if r.UserKey != "" {
		return r.UserKey
	}
	return s.UserKey(r.UserID)
}

// Match appends to out, in evaluation order, one Applied for every rule that
// applies to r at now, and returns the extended slice. A rule applies when
// its endpoints, methods and tiers match and every dimension of its key has
// a non-empty value in r: a rule keyed by user_id does not apply to
// anonymous requests, one keyed by attr:app_key not to requests without
// that attribute (write another rule keyed by ip to cover them).
//
// Each Call has its keys, the algorithm, the limits in force at now (the
// first active schedule entry's, else the rule's; within those, the
// request tier's override if any), the penalty in force, the escalations
// active at now, Cost = r.Cost, and Leased for a rule that leases (the
// limiter bounds what it holds by Rule.LeaseMax of the call's limits). The
// call of a rule spent by reports is a probe of cost 1 instead: is a unit
// left? The call of a rule that reserves takes the check's estimate
// (Request.Reserve, else the rule's Reserve), and is to be named by the
// caller (Call.HoldID). Limits and Escalations are shared: do not modify them. Match
// allocates once per applied rule (its keys).
func (s *Set) Match(r *Request, now time.Time, out []Applied) []Applied {
	memo := newKeyMemo(r)
	for _, rule := range s.requestRules {
		a, ok := rule.apply(r, now, &memo)
		if !ok {
			continue
		}
		switch {
		case rule.Algorithm == decide.Concurrency:
			a.Call.Cost = 1 // a hold, whatever the request's cost; the caller names it (Call.HoldID)
		case rule.Reserves():
			// a take of the estimate; the caller names it (Call.HoldID)
			a.Call.Cost, a.Call.Reserve = rule.estimate(r), rule.ReserveLifetime()
		case rule.SpentByReports():
			a.Call.Cost, a.Call.Probe = 1, true
		default:
			a.Call.Cost, a.Call.DebitDenied = r.Cost, rule.DebitsDenied()
		}
		out = append(out, a)
	}
	return out
}

// MatchReport appends to out, in evaluation order, one Applied for every
// rule spent by reports that a report of status for r spends (see
// Rule.Spends), each a call that debits r.Cost whether it fits or not, and
// returns the extended slice. Rules spent by checks are left alone: a
// report never spends what checks do.
func (s *Set) MatchReport(r *Request, status int, now time.Time, out []Applied) []Applied {
	return s.MatchReportHold(r, status, "", now, out)
}

// MatchReportHold is MatchReport for a report naming hold, the id its
// check answered: the call of a rule that reserves settles the reservation
// hold names instead of debiting (Call.Settle), with the report's cost
// when its status spends the rule and 0 when not (the whole reservation
// goes back), so that no reservation waits for its lapse. Without hold,
// such a rule is debited as any rule spent by reports.
func (s *Set) MatchReportHold(r *Request, status int, hold string, now time.Time, out []Applied) []Applied {
	memo := newKeyMemo(r)
	for _, rule := range s.reportRules {
		spends := rule.Spends(status)
		settles := hold != "" && rule.Reserves()
		if !spends && !settles {
			continue
		}
		a, ok := rule.apply(r, now, &memo)
		if !ok {
			continue
		}
		a.Call.Cost, a.Call.DebitDenied = r.Cost, true
		if rule.Reserves() {
			a.Call.Reserve = rule.ReserveLifetime() // its state is never counted
		}
		if settles {
			a.Call.HoldID, a.Call.Settle = hold, true
			if !spends {
				a.Call.Cost = 0
			}
		}
		out = append(out, a)
	}
	return out
}

// MatchHolds appends to out, in evaluation order, one Applied for every
// concurrency rule that applies to r at now (as Match would apply it),
// each a call that releases hold on the rule's key for r, and returns the
// extended slice. The key comes from r, so a hold is released only where
// a check of the same subject took it.
func (s *Set) MatchHolds(r *Request, hold string, now time.Time, out []Applied) []Applied {
	memo := newKeyMemo(r)
	for _, rule := range s.holdRules {
		a, ok := rule.apply(r, now, &memo)
		if !ok {
			continue
		}
		a.Call.Cost, a.Call.Release, a.Call.HoldID = 0, true, hold
		out = append(out, a)
	}
	return out
}

// HasHoldRules reports whether the set has concurrency rules, whose holds
// a report may release.
func (s *Set) HasHoldRules() bool { return len(s.holdRules) > 0 }

// apply returns the rule's Applied for r at now, its call without cost and
// debit rule, or false when the rule does not apply to r.
func (rule *Rule) apply(r *Request, now time.Time, memo *keyMemo) (Applied, bool) {
	c := rule.c
	if !c.matches(r) {
		return Applied{}, false
	}
	keys, ok := c.keys(r, memo)
	if !ok {
		return Applied{}, false
	}
	limits, penalty := c.limitsAt(r.Tier, now)
	return Applied{Rule: rule, Call: decide.Call{
		Keys:        keys,
		Algorithm:   rule.Algorithm,
		Limits:      limits,
		Penalty:     penalty,
		Escalations: c.escalations.at(now),
		Leased:      rule.Leased(),
	}}, true
}

// KeyedByUser reports whether the rule's key has the user_id dimension: its
// budget is an account's.
func (r *Rule) KeyedByUser() bool {
	if r.c == nil {
		return false
	}
	for _, d := range r.c.dims {
		if d.kind == dimUserID {
			return true
		}
	}
	return false
}

// Keys returns the Redis keys of the rule for req, or false when a key
// dimension has no value in req or the rule does not come from a Set.
func (r *Rule) Keys(req *Request) (decide.Keys, bool) {
	if r.c == nil {
		return decide.Keys{}, false
	}
	return r.c.keys(req, nil)
}

func (c *compiled) matches(r *Request) bool {
	if len(c.methods) > 0 && !containsFold(c.methods, r.Method) {
		return false
	}
	if len(c.tiers) > 0 && !containsFold(c.tiers, r.Tier) {
		return false
	}
	if len(c.endpoints) == 0 {
		return true
	}
	for i := range c.endpoints {
		if c.endpoints[i].Match(r.Endpoint) {
			return true
		}
	}
	return false
}

// keys builds the rule's keys for r; memo (nil: none) remembers the values
// computed for the rules of one request.
func (c *compiled) keys(r *Request, memo *keyMemo) (decide.Keys, bool) {
	var buf [maxKeyDims]string
	vals := buf[:len(c.dims)]
	for i, d := range c.dims {
		switch d.kind {
		case dimIP:
			vals[i] = c.ipValue(r, memo)
		case dimUserID:
			vals[i] = c.userValue(r, memo)
		default:
			vals[i] = d.value(r)
		}
		if vals[i] == "" {
			return decide.Keys{}, false
		}
	}
	return buildKeys(c.head, c.suffix, c.names, vals), true
}

// keyMemo holds key values computed once while one request's rules are
// matched: an IPv6 client's prefix for one grouping (rules sharing an
// ipv6_prefix, most keep the default, format it once), and the user id's
// key (Request.UserKey, else Set.UserKey the first time a rule needs it).
type keyMemo struct {
	bits    int
	ip      string
	user    string
	hasUser bool
}

func newKeyMemo(r *Request) keyMemo { return keyMemo{user: r.UserKey, hasUser: r.UserKey != ""} }

// userValue returns the user_id dimension's value of r: its key.
func (c *compiled) userValue(r *Request, memo *keyMemo) string {
	if memo == nil {
		if r.UserKey != "" {
			return r.UserKey
		}
		return c.userKey(r.UserID)
	}
	if !memo.hasUser {
		memo.user, memo.hasUser = c.userKey(r.UserID), true
	}
	return memo.user
}

// ipValue returns the ip dimension's value of r: the address for IPv4 (no
// allocation) and for a rule without IPv6 grouping, else the client's IPv6
// prefix in CIDR form (IPSubject).
func (c *compiled) ipValue(r *Request, memo *keyMemo) string {
	if r.IP == "" || c.ipv6Bits == 128 {
		return r.IP
	}
	a := r.Addr
	if !a.IsValid() {
		var err error
		if a, err = netip.ParseAddr(r.IP); err != nil {
			return r.IP
		}
	}
	if !a.Is6() || a.Is4In6() { // IPv4-mapped addresses are IPv4 clients (httpapi unmaps them)
		return r.IP
	}
	if memo != nil && memo.bits == c.ipv6Bits {
		return memo.ip
	}
	v := IPSubject(a, c.ipv6Bits)
	if memo != nil {
		memo.bits, memo.ip = c.ipv6Bits, v
	}
	return v
}

// limitsAt returns the limits and penalty in force for tier at now.
func (c *compiled) limitsAt(tier string, now time.Time) ([]decide.Limit, time.Duration) {
	for i := range c.schedule {
		w := &c.schedule[i]
		if !w.active(now) {
			continue
		}
		if w.hasPenalty {
			return w.limits.forTier(tier), w.penalty
		}
		return w.limits.forTier(tier), c.penalty
	}
	return c.limits.forTier(tier), c.penalty
}

func containsFold(list []string, s string) bool {
	for _, v := range list {
		if strings.EqualFold(v, s) {
			return true
		}
	}
	return false
}
