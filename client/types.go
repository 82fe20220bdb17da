package client

import (
	"context"
	"time"
)

// The reasons of a Decision, as the limiter's API gives them.
const (
	ReasonOK          = "ok"
	ReasonRateLimited = "rate_limited"
	ReasonBanned      = "banned"
	ReasonExempt      = "exempt"
	ReasonNoRule      = "no_rule"
	// ReasonUnavailable is the reason of a decision the failure policy made
	// (Decision.Fallback) because the limiter did not answer.
	ReasonUnavailable = "unavailable"
	// ReasonInvalid is the reason of a refusal of a request the limiter
	// refused as invalid, or the client would not send (the error is
	// ErrInvalid): no failure policy admits it.
	ReasonInvalid = "invalid"
	// ReasonCallerGone is the reason of a refusal of a request the limiter
	// could not decide after its caller had gone (the error is
	// ErrCallerGone): nobody waits for the answer, and the failure policy
	// is not asked.
	ReasonCallerGone = "caller_gone"
	// ReasonUndecidable is the reason of a refusal by a rule whose failure
	// policy (on_redis_failure) is deny, which the limiter could not decide
	// (its Redis is down), named in RuleID (the error is ErrUndecidable):
	// the limiter answered, and refused the request by the rule's own
	// policy, which the client's failure policy does not override.
	ReasonUndecidable = "undecidable"
)

// Request is the subject of a decision (POST /v1/check): who asks for
// what. IP and Endpoint are required.
type Request struct {
	IP       string
	UserID   string
	Endpoint string
	// Method defaults to GET at the limiter.
	Method string
	Tier   string
	// Cost is what the request counts for; 0 counts 1.
	Cost       int64
	Attributes map[string]string
}

// Decision is the limiter's verdict on a Request, or, when Fallback is
// set, the failure policy's (the limiter did not decide), or a refusal
// without either (ReasonInvalid, ReasonCallerGone, ReasonUndecidable).
type Decision struct {
	// Allowed is the verdict: false means refuse the request (429 when
	// rate limited, 403 when banned, 503 when its rule could not be
	// decided).
	Allowed bool
	// Reason is one of the Reason constants.
	Reason string
	// RuleID and Algorithm name the rule the limits below belong to
	// (empty when no rule applied).
	RuleID    string
	Algorithm string
	// Limit and Remaining are that rule's quota and what is left of it.
	Limit, Remaining int64
	// Reset is the time until the quota is whole again; RetryAfter, when
	// refused, until a request could be admitted.
	Reset, RetryAfter time.Duration
	// Mode is how the limiter decided: redis, local or permissive.
	Mode string
	// Shadow is true when a rule in shadow mode would have refused.
	Shadow bool
	// EventID identifies the decision's event on the decisions topic.
	EventID string
	// Fallback is true when the limiter did not decide and the failure
	// policy did (Reason is then ReasonUnavailable).
	Fallback bool
	// Hold names the slot an admitted request holds on the keys of the
	// concurrency rules that applied to it (22 base64url characters);
	// empty when it holds none. Report the request's outcome with it
	// (Outcome.Hold) to free the slot: Middleware and the rlgrpc
	// interceptors do so when the handler returns. Unreleased, the slot is
	// taken until the rule's hold lifetime has passed.
	Hold string

	headers rateLimitHeaders // the limiter's RateLimit headers, for the middleware
}

// CostNone is the Outcome.Cost of a response that used nothing: it reports
// a cost of 0 (a zero Cost reports none, which the limiter counts as 1).
const CostNone = -1

// Outcome is what happened after a response (POST /v1/report): the
// subject, as in Request, the status its client got and the units it used.
type Outcome struct {
	IP       string
	UserID   string
	Endpoint string
	Method   string
	Tier     string
	// Status is the HTTP status the client got, 100 to 599; 0 with Hold:
	// no outcome, the report only releases the hold (no outcome event, no
	// budget spent; limiters before the release-only report refuse it).
	Status int
	// Cost is the units the response used (an LLM call's tokens); 0: not
	// given (the limiter counts 1); CostNone: 0 units.
	Cost       int64
	Attributes map[string]string
	// Hold, when set, is the Decision.Hold of the request's check: the
	// report also releases that hold, on the keys the subject above builds
	// (send the check's subject). A hold that is not one a check answered
	// (22 base64url characters) is refused as invalid, by the client
	// before it is sent.
	Hold string
}

// ReportResult is the limiter's answer to an outcome report.
type ReportResult struct {
	EventID string
	Mode    string
	// Rules are the rules the report spent (spent_by: report), with what is
	// left of each budget.
	Rules []Budget
}

// Budget is what is left of a rule's budget after a report.
type Budget struct {
	RuleID           string
	Limit, Remaining int64
	Reset            time.Duration
	// Spent is true when no unit is left: the rule's checks are refused
	// until the window frees one.
	Spent bool
	// Released is true, for a concurrency rule whose hold the report named
	// (Outcome.Hold), when the report ended the hold; false when the rule's
	// key held no such hold (released already, lapsed, or taken on another
	// key), and for every other rule.
	Released bool
}

// Limiter is what Middleware and the gRPC interceptors (package rlgrpc)
// ask of a limiter's client: a decision before a request, and its outcome
// reported after. *Client is the one that calls a limiter; package
// clienttest has one that answers by the rules a test sets.
type Limiter interface {
	// Check decides req, as Client.Check.
	Check(ctx context.Context, req *Request) (Decision, error)
	// ReportAsync queues the outcome o, as Client.ReportAsync. Middleware
	// and the interceptors release a check's hold through it too: an
	// outcome whose Hold is the decision's, reported when the handler
	// returns, whatever it did.
	ReportAsync(o *Outcome) bool
}
