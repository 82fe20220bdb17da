// Package clienttest stands in for a ratewarden limiter in an
// application's own tests: a Fake decides checks by the rules the test
// sets, without a limiter or a network, and records the checks and the
// outcomes it gets. It is a client.Limiter, so client.Middleware and the
// rlgrpc interceptors take it where they take a *client.Client:
//
//	f := clienttest.New()
//	f.Deny(clienttest.Match{Endpoint: "/api/login"})
//	h := client.Middleware(f, client.MiddlewareConfig{})(mux)
//	// requests to /api/login are answered 429; the others reach mux
package clienttest

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"maps"
	"sync"
	"time"

	"github.com/ratewarden/ratewarden/client"
)

// Match selects the checks a rule decides: each field set must equal the
// check's; an empty field matches any value. The zero Match matches every
// check.
type Match struct {
	Endpoint, Method, IP, UserID, Tier string
}

func (m *Match) matches(r *client.Request) bool {
	return (m.Endpoint == "" || m.Endpoint == r.Endpoint) && (m.Method == "" || m.Method == r.Method) &&
		(m.IP == "" || m.IP == r.IP) && (m.UserID == "" || m.UserID == r.UserID) && (m.Tier == "" || m.Tier == r.Tier)
}

// rule decides the checks it matches: allow, or, with an allowance set,
// allow while it lasts and deny after, or, with slots set, allow while
// fewer than slots of its holds are held and deny after.
type rule struct {
	match        Match
	allow, deny  client.Decision
	allowance    int64
	allowanceSet bool
	slots        int64
	held         map[string]struct{} // the holds taken and not released
}

// Fake is a client.Limiter that decides by rules. The rule set last that
// matches a check decides it; a check no rule matches is allowed
// (client.ReasonNoRule), as the limiter allows it. It is safe for
// concurrent use. The zero Fake is ready to use.
type Fake struct {
	mu       sync.Mutex
	rules    []rule
	checks   []client.Request
	outcomes []client.Outcome
}

var _ client.Limiter = (*Fake)(nil)

// New returns a Fake with no rules: it allows every check.
func New() *Fake { return &Fake{} }

// Decide makes d the decision on the checks m matches.
func (f *Fake) Decide(m Match, d client.Decision) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = append(f.rules, rule{match: m, allow: d, deny: d})
}

// Allow allows the checks m matches (client.ReasonOK).
func (f *Fake) Allow(m Match) {
	f.Decide(m, client.Decision{Allowed: true, Reason: client.ReasonOK})
}

// Deny refuses the checks m matches as rate limited, with a retry after
// a second, as the limiter would refuse them.
func (f *Fake) Deny(m Match) {
	f.Decide(m, denied(client.ReasonRateLimited, time.Second))
}

// Ban refuses the checks m matches as banned, with a retry after an hour.
func (f *Fake) Ban(m Match) {
	f.Decide(m, denied(client.ReasonBanned, time.Hour))
}

// Limit allows n of the checks m matches, from now on, and refuses the
// ones after as rate limited (a retry after a second): a budget of n
// requests that never refills.
func (f *Fake) Limit(m Match, n int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = append(f.rules, rule{match: m, allowance: n, allowanceSet: true,
		allow: client.Decision{Allowed: true, Reason: client.ReasonOK, Limit: n},
		deny:  denied(client.ReasonRateLimited, time.Second)})
}

// Concurrent allows n of the checks m matches to be in flight at once, as
// a concurrency rule does: each admitted check is answered a hold
// (Decision.Hold), and holds a slot until an outcome naming that hold is
// reported (ReportAsync, which the middleware and the interceptors call
// when the handler returns); a check while n are held is refused as rate
// limited (a retry after a second). Unlike the limiter's, the slots are
// shared by every check m matches, whatever its subject, and never lapse.
func (f *Fake) Concurrent(m Match, n int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = append(f.rules, rule{match: m, slots: n, held: map[string]struct{}{},
		allow: client.Decision{Allowed: true, Reason: client.ReasonOK, Algorithm: "concurrency", Limit: n},
		deny:  client.Decision{Reason: client.ReasonRateLimited, Algorithm: "concurrency", Limit: n, RetryAfter: time.Second}})
}

// Held returns the holds taken by the checks of Concurrent rules and not
// released yet, in all: 0 once every admitted request's outcome is
// reported.
func (f *Fake) Held() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, r := range f.rules {
		n += len(r.held)
	}
	return n
}

// newHold returns a hold id as the limiter makes one: 16 random bytes, in
// base64url.
func newHold() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func denied(reason string, retry time.Duration) client.Decision {
	return client.Decision{Reason: reason, RetryAfter: retry}
}

// Check decides req by the rules and records it. Its error is always nil:
// a Fake always decides.
func (f *Fake) Check(_ context.Context, req *client.Request) (client.Decision, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.checks = append(f.checks, cloneRequest(*req))
	for i := len(f.rules) - 1; i >= 0; i-- {
		r := &f.rules[i]
		if !r.match.matches(req) {
			continue
		}
		if r.held != nil {
			if int64(len(r.held)) >= r.slots {
				return r.deny, nil
			}
			d := r.allow
			d.Hold = newHold()
			r.held[d.Hold] = struct{}{}
			d.Remaining = r.slots - int64(len(r.held))
			return d, nil
		}
		if !r.allowanceSet {
			return r.allow, nil
		}
		if r.allowance > 0 {
			r.allowance--
			d := r.allow
			d.Remaining = r.allowance
			return d, nil
		}
		d := r.deny
		d.Limit = r.allow.Limit
		return d, nil
	}
	return client.Decision{Allowed: true, Reason: client.ReasonNoRule}, nil
}

// ReportAsync records o and returns true. An o naming a hold (o.Hold)
// releases it.
func (f *Fake) ReportAsync(o *client.Outcome) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if o.Hold != "" {
		for _, r := range f.rules {
			delete(r.held, o.Hold)
		}
	}
	c := *o
	c.Attributes = maps.Clone(o.Attributes)
	f.outcomes = append(f.outcomes, c)
	return true
}

// Checks returns the checks the Fake got, in order.
func (f *Fake) Checks() []client.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]client.Request(nil), f.checks...)
}

// Outcomes returns the outcomes reported to the Fake, in order. The
// middleware reports after the handler has returned: an outcome is there
// once the request's ServeHTTP has returned.
func (f *Fake) Outcomes() []client.Outcome {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]client.Outcome(nil), f.outcomes...)
}

// Reset forgets the rules, checks and outcomes, and the holds with them.
func (f *Fake) Reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules, f.checks, f.outcomes = nil, nil, nil
}

func cloneRequest(r client.Request) client.Request {
	r.Attributes = maps.Clone(r.Attributes)
	return r
}
