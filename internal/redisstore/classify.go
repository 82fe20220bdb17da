package redisstore

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// ClassifyError returns a bounded class of err for metric labels: "timeout",
// "connection", "noscript", "script", "canceled" or "other" ("" for nil).
func ClassifyError(err error) string {
	var netErr net.Error
	var redisErr redis.Error
	switch {
	case err == nil:
		return ""
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, redis.ErrPoolTimeout),
		errors.As(err, &netErr) && netErr.Timeout():
		return "timeout"
	case isNoScript(err):
		return "noscript"
	case errors.Is(err, redis.ErrClosed), errors.Is(err, redis.ErrPoolExhausted),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE), errors.As(err, new(*net.OpError)):
		return "connection"
	case errors.As(err, &redisErr):
		if unavailable(err) {
			return "connection"
		}
		return "script"
	case errors.Is(err, errReply):
		return "script"
	default:
		return "other"
	}
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
