package client

import (
	"errors"
	"fmt"
	"net/http"
)

// Error is a call the limiter did not answer as its API says. Answered
// tells the two kinds apart: the limiter (or a proxy in between) answered,
// with a status other than the API's, or a body that is not its answer
// (Status and Message say what came); or no answer came at all (a refused
// connection, a deadline, the breaker open, a request the client would not
// send: Err says why).
//
// errors.Is tells the causes a caller acts on apart: ErrInvalid (the
// request itself was refused), ErrUndecidable (a rule whose failure policy
// is deny could not be decided), ErrUnauthorized (the client's credentials
// were refused), ErrCallerGone (the call failed after the caller's context
// had ended), ErrBreakerOpen, ErrClosed, context.DeadlineExceeded.
type Error struct {
	// Op is the call: check, check batch, report, report batch or ping.
	Op       string
	Answered bool
	// Status is the HTTP status of the answer, when Answered.
	Status int
	// Message is the answer's error message, or what was wrong with it.
	Message string
	// Err is the cause when nothing was answered (ErrBreakerOpen, a
	// network error, context.DeadlineExceeded, ErrInvalid).
	Err error

	// callerGone is the error of the caller's context, which had ended
	// when the call failed: the check was refused rather than decided by
	// the failure policy.
	callerGone error
	// denyRule is the rule whose failure policy is deny that the limiter
	// could not decide, as its 503 names it: the check is that rule's
	// refusal (ReasonUndecidable).
	denyRule string
}

func (e *Error) Error() string {
	var s string
	switch {
	case e.Answered:
		s = fmt.Sprintf("ratewarden %s: the limiter answered %d: %s", e.Op, e.Status, e.Message)
	case errors.Is(e.Err, ErrInvalid):
		s = fmt.Sprintf("ratewarden %s: not sent: %v", e.Op, e.Err)
	default:
		s = fmt.Sprintf("ratewarden %s: no answer: %v", e.Op, e.Err)
	}
	if e.callerGone != nil {
		s += fmt.Sprintf("; refused, the caller had gone (%v)", e.callerGone)
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// Is reports whether e is target: ErrInvalid for an answer refusing the
// request (400, 413, 422), ErrUndecidable for the limiter's 503 naming a
// rule whose failure policy is deny, ErrUnauthorized for an answer refusing
// the client's credentials (401, 403), ErrCallerGone (and the caller's
// context's own error) for a call that failed after the caller's context
// had ended. errors.Is tries Err too.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrInvalid:
		return e.Answered && refusesRequest(e.Status)
	case ErrUndecidable:
		return e.denyRule != ""
	case ErrUnauthorized:
		return e.Answered && refusesCredentials(e.Status)
	case ErrCallerGone:
		return e.callerGone != nil
	}
	return e.callerGone != nil && errors.Is(e.callerGone, target)
}

// refusesRequest reports whether an answer's status refuses the request it
// answers for what it holds: a bad field (400), its size (413), its
// content (422). Anything else (404 from a proxy, 429, 5xx) says nothing
// of the request.
func refusesRequest(status int) bool {
	return status == http.StatusBadRequest || status == http.StatusRequestEntityTooLarge || status == http.StatusUnprocessableEntity
}

// refusesCredentials reports whether an answer's status refuses the
// client's credentials.
func refusesCredentials(status int) bool {
	return status == http.StatusUnauthorized || status == http.StatusForbidden
}

// ErrBreakerOpen is the cause of a call not made because the limiter
// failed the calls before it (see Config.BreakerFailures): it costs no
// round trip.
var ErrBreakerOpen = errors.New("circuit breaker open: the limiter failed the last calls")

// ErrClosed is the cause of a call made after Close.
var ErrClosed = errors.New("client closed")

// ErrInvalid is what a request refused for what it holds is: the limiter
// answered 400, 413 or 422 (Answered, with its Status and Message), or the
// client would not send it (Err wraps ErrInvalid): a body over the API's
// 64 KiB, an outcome ReportAsync refuses. Such a check is refused
// (ReasonInvalid), never decided by the failure policy: a request made
// invalid on purpose must not be admitted for it.
var ErrInvalid = errors.New("refused as invalid")

// ErrUndecidable is what the limiter's refusal of a check by a rule whose
// failure policy (on_redis_failure) is deny is, when it could not decide
// that rule (its Redis is down): a 503 naming the rule and its policy
// (Answered, Status 503, the limiter's Message), or, in CheckBatch, such an
// entry. Such a check is refused (ReasonUndecidable), never decided by the
// failure policy: FailOpen would override the rule author's deny. It is no
// failure of the limiter, which answered: the breaker does not count it. A
// 503 that does not name the rule and its policy (a proxy's, a limiter
// down) is the limiter unavailable, for the failure policy.
var ErrUndecidable = errors.New("a rule whose failure policy is deny could not be decided")

// ErrUnauthorized is what an answer refusing the client's credentials is
// (401, 403): Config.Token is not one of the limiter's API_TOKENS, or a
// proxy in front refused the client. The failure policy decides such a
// check; Stats.Unauthorized counts them, and Ping finds them at start.
var ErrUnauthorized = errors.New("the limiter refused the client's credentials")

// ErrCallerGone is what the error of a check refused because its caller
// had gone is: the limiter could not decide it, and the caller's context
// had ended (the client went away, its deadline passed), so the failure
// policy was not asked (Decision.Reason is ReasonCallerGone).
var ErrCallerGone = errors.New("the caller had gone")

// ErrReportQueueFull is the cause of an outcome ReportAsync dropped
// because Config.ReportQueue outcomes were waiting to be sent.
var ErrReportQueueFull = errors.New("report queue full")
