package redisstore

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// errNodeDown is the error of calls to a node whose breaker is open: they
// fail without a round trip until the node is tried again.
var errNodeDown = errors.New("node down: not tried until its breaker lets a round trip through")

// BreakerOpen reports whether err failed calls without a round trip
// because their node's breaker is open: the node failed REDIS_BREAKER_FAILURES
// round trips in a row and was found down, not slow (see lane.record). The
// limiter reads it through Coalescer.BreakerOpen.
func BreakerOpen(err error) bool { return errors.Is(err, errNodeDown) }

// nodeError is the error of a call whose Redis Cluster node failed.
type nodeError struct {
	addr string
	// partial is true when other nodes answered meanwhile: the failure
	// concerns the slots of this node only.
	partial bool
	err     error
}

func (e *nodeError) Error() string { return "redis node " + e.addr + ": " + e.err.Error() }

func (e *nodeError) Unwrap() error { return e.err }

// PartialFailure reports whether the rest of the cluster answers (the
// limiter's partialFailure).
func (e *nodeError) PartialFailure() bool { return e.partial }

// The classes ClassifyError returns.
const (
	classTimeout    = "timeout"
	classConnection = "connection"
	classNoScript   = "noscript"
	classScript     = "script"
	classCanceled   = "canceled"
	classOther      = "other"
)

// ErrorClasses returns every class ClassifyError can return for an error,
// so that metrics labelled by class can start each series at 0.
func ErrorClasses() []string {
	return []string{classTimeout, classConnection, classNoScript, classScript, classCanceled, classOther}
}

// nodeFailure reports whether err means the node did not serve the call
// (as opposed to a fault of the call itself).
func nodeFailure(err error) bool {
	switch ClassifyError(err) {
	case classTimeout, classConnection:
		return true
	}
	return false
}

// ClassifyError returns a bounded class of err for metric labels: "timeout",
// "connection", "noscript", "script", "canceled" or "other" ("" for nil);
// ErrorClasses lists them.
func ClassifyError(err error) string {
	var netErr net.Error
	var redisErr redis.Error
	switch {
	case err == nil:
		return ""
	case errors.Is(err, context.Canceled):
		return classCanceled
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, redis.ErrPoolTimeout),
		errors.As(err, &netErr) && netErr.Timeout():
		return classTimeout
	case isNoScript(err):
		return classNoScript
	case errors.Is(err, redis.ErrClosed), errors.Is(err, redis.ErrPoolExhausted), errors.Is(err, errNodeDown),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE), errors.As(err, new(*net.OpError)):
		return classConnection
	case errors.As(err, &redisErr):
		if unavailable(err) {
			return classConnection
		}
		return classScript
	case errors.Is(err, errReply):
		return classScript
	default:
		return classOther
	}
}

// Unreached reports whether err means that the calls it failed never ran
// in Redis: they were not sent (a node whose breaker is open, a connection
// that could not be made or taken from the pool, a closed client) or the
// server refused them before running them (LOADING, READONLY, CLUSTERDOWN,
// MOVED, ...). Their outcome is known: nothing was counted. Any other
// failure, a timeout or a connection lost after the calls were written,
// leaves it unknown (see the limiter's Backend.Unreached).
func Unreached(err error) bool {
	var op *net.OpError
	switch {
	case err == nil:
		return false
	case errors.Is(err, errNodeDown), errors.Is(err, errClosed), errors.Is(err, redis.ErrClosed),
		errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, redis.ErrPoolExhausted),
		errors.Is(err, syscall.ECONNREFUSED), errors.As(err, &op) && op.Op == "dial":
		return true
	}
	var redisErr redis.Error
	return errors.As(err, &redisErr) && unavailable(err)
}

// unavailable reports a server error meaning the node cannot serve now
// rather than a fault of the script.
func unavailable(err error) bool {
	for _, prefix := range []string{"LOADING", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "MOVED", "ASK"} {
		if redis.HasErrorPrefix(err, prefix) {
			return true
		}
	}
	return false
}

// The limiter's Backend is a Coalescer: its errors read as this file
// classifies them.

// ErrorClass is ClassifyError.
func (c *Coalescer) ErrorClass(err error) string { return ClassifyError(err) }

// ErrorClasses is the package's ErrorClasses.
func (c *Coalescer) ErrorClasses() []string { return ErrorClasses() }

// Unreached is the package's Unreached.
func (c *Coalescer) Unreached(err error) bool { return Unreached(err) }

// BreakerOpen is the package's BreakerOpen.
func (c *Coalescer) BreakerOpen(err error) bool { return BreakerOpen(err) }
