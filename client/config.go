package client

import (
	"context"
	"crypto/tls"
	"net/http"
	"time"
)

// Config configures a Client. Only URL is required.
type Config struct {
	// URL is the limiter's decision API: http://host:port, or https:// for
	// its TLS listener.
	URL string
	// Token is one of the limiter's API_TOKENS, sent as a bearer token;
	// empty: none.
	Token string
	// TLS configures https: the roots that verify the limiter (nil: the
	// system's) and, for mTLS, the client certificate. It is the client's
	// own transport's; with Transport set, that transport's TLS applies.
	TLS *tls.Config
	// Transport, when set, makes every call of the client (checks, reports,
	// pings): to trace them, send them through a proxy, or count them. It
	// gets POST requests with a context that ends at the call's Timeout,
	// and an Idempotency-Key entry without a value, which *http.Transport
	// takes as leave to send a request again on a new connection when a
	// kept-alive one was closed under it (and does not send). The client
	// does not close its idle connections. nil: the client's own
	// *http.Transport, with MaxConns connections kept alive, no proxy,
	// HTTP/1.1, and TLS.
	Transport http.RoundTripper
	// Timeout bounds a call's round trip, and, before it, its wait for a
	// connection (MaxConns): a call takes 2 × Timeout at most. The
	// caller's context does not bound the round trip: its deadline or
	// cancellation never cuts it short, since a check cut short would be
	// decided by the failure policy, which a client could then pick by
	// going away on purpose (see ReasonCallerGone). Default 250ms.
	Timeout time.Duration
	// MaxConns bounds the calls on their way to the limiter, one on each
	// connection. A call that finds them all busy waits for one, for
	// Timeout at most, and only while its caller is there: a check that
	// gets none is refused (ReasonCallerGone) when its caller has gone,
	// else decided by the failure policy, and the breaker does not count
	// it (the limiter was not asked). Default 64.
	MaxConns int
	// OnFailure decides a check the limiter could not decide (it did not
	// answer, the breaker is open, it answered an error, or it refused the
	// client's token), unless its caller had gone. A check the limiter
	// refused as invalid, or refused by a rule whose on_redis_failure is
	// deny that it could not decide (ReasonUndecidable), is refused,
	// whatever the policy. Default FailOpen.
	OnFailure FailurePolicy
	// OnError, when set, is called with every error of a check or report:
	// op is "check", "check batch", "report" or "report batch", err what
	// the call returned, or, for an outcome of ReportAsync, why it was not
	// reported (refused, dropped, or lost with a failed call: one call per
	// batch). It is the way to log a refused token or a limiter down:
	// without it the failure policy answers silently. It is called from
	// the request's goroutine (and the reporter's), possibly thousands of
	// times a second while the limiter is down: it must be quick and safe
	// for concurrent use, and should count or sample rather than log each.
	OnError func(op string, err error)
	// BreakerFailures consecutive failed calls, checks and reports alike,
	// open the breaker for BreakerOpen: calls then fail at once, without a
	// round trip, until one probe call succeeds. A failed call is one that
	// got no answer, a 5xx, a bad answer, or a refusal of the client's
	// credentials (401, 403); a refusal of the request itself (400, 413,
	// 422), or a deny rule's 503 (ErrUndecidable), shows a limiter that
	// works and is no failure. Defaults 5 and 1s.
	BreakerFailures int
	BreakerOpen     time.Duration
	// ReportQueue bounds the outcomes ReportAsync holds before they are
	// sent; beyond it they are dropped and counted. Each holds its fields
	// as they are sent, within the API's bounds (about 9 KiB for the
	// longest path, 43 KiB with every field at its bound), whatever the
	// request had. Default 10 000.
	ReportQueue int
	// DisableBatching makes every check a call of its own. By default,
	// concurrent checks share calls: a check goes at once, alone (POST
	// /v1/check), when no other call of the client is on its way; one
	// that arrives while one is waits for the checks that arrive
	// meanwhile, and they go together (POST /v1/check/batch, as many
	// calls as the API's 100 checks and 64 KiB take, those at once) when
	// a call returns or BatchWait has passed. Each check gets what its own call would
	// have given it (its decision and rate-limit headers, its error, the
	// failure policy's decision), and counts for the breaker as its own
	// call would; a caller whose context ends before its check is sent
	// leaves, refused (ReasonCallerGone). Batching is what makes a busy
	// client cheap for the limiter and for itself (docs/performance.md).
	// A limiter older than batches with rate-limit headers refuses the
	// first batch (400, nothing decided): its checks are sent again
	// alone, and the client batches no more. Concurrent Report calls
	// share POST /v1/report/batch the same way (ReportAsync batches
	// either way).
	DisableBatching bool
	// BatchWait is the longest a check (or report) waits for others to go
	// with while a call is on its way (unless a call returns first).
	// Default 100µs.
	BatchWait time.Duration
}

// FailurePolicy says what a check answers when the limiter could not
// decide: FailOpen, FailClosed or a Fallback. It is the function that
// decides such a check; the Decision it returns gets Fallback set. The
// zero FailurePolicy (nil) is FailOpen.
type FailurePolicy func(ctx context.Context, req *Request) Decision

// FailOpen, as a FailurePolicy, allows the request: availability before
// protection. It is a function so that no package can change what
// client.FailOpen means to another.
func FailOpen(context.Context, *Request) Decision {
	return Decision{Allowed: true, Reason: ReasonUnavailable, Fallback: true}
}

// FailClosed, as a FailurePolicy, refuses the request: protection before
// availability. Its refusals say to retry after a second (the breaker's
// default open time).
func FailClosed(context.Context, *Request) Decision {
	return Decision{Reason: ReasonUnavailable, RetryAfter: time.Second, Fallback: true}
}

// Fallback decides with decide, a local policy (an in-process limiter,
// say); its Decision is returned with Fallback set.
func Fallback(decide func(ctx context.Context, req *Request) Decision) FailurePolicy {
	return decide
}

func (p FailurePolicy) decide(ctx context.Context, req *Request) Decision {
	if p == nil {
		p = FailOpen
	}
	d := p(ctx, req)
	d.Fallback = true
	return d
}

// The defaults of Config.
const (
	defaultTimeout         = 250 * time.Millisecond
	defaultMaxConns        = 64
	defaultBreakerFailures = 5
	defaultBreakerOpen     = time.Second
	defaultReportQueue     = 10_000
)
