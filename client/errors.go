package client

import (
	"errors"
	"fmt"
)

// Error is a call the limiter did not answer as its API says. Answered
// tells the two kinds apart: the limiter (or a proxy in between) answered,
// with a status other than the API's, or a body that is not its answer
// (Status and Message say what came); or no answer came at all (a refused
// connection, a deadline, the breaker open: Err says why).
type Error struct {
	// Op is the call: check, check batch, report or report batch.
	Op       string
	Answered bool
	// Status is the HTTP status of the answer, when Answered.
	Status int
	// Message is the answer's error message, or what was wrong with it.
	Message string
	// Err is the cause when nothing was answered (ErrBreakerOpen, a
	// network error, context.DeadlineExceeded).
	Err error
}

func (e *Error) Error() string {
	if e.Answered {
		return fmt.Sprintf("ratewarden %s: the limiter answered %d: %s", e.Op, e.Status, e.Message)
	}
	return fmt.Sprintf("ratewarden %s: no answer: %v", e.Op, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// ErrBreakerOpen is the cause of a call not made because the limiter
// failed the calls before it (see Config.BreakerFailures): it costs no
// round trip.
var ErrBreakerOpen = errors.New("circuit breaker open: the limiter failed the last calls")

// ErrClosed is the cause of a call made after Close.
var ErrClosed = errors.New("client closed")
