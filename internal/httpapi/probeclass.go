package httpapi

import (
	"context"
	"errors"
	"net"
	"syscall"
)

// probeErrorClass names what kind of failure a readiness probe met, in
// words that carry no address or other detail of the network behind it.
func probeErrorClass(err error) string {
	var dnsErr *net.DNSError
	var netErr net.Error
	var opErr *net.OpError
	switch {
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &netErr) && netErr.Timeout()):
		return "timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.As(err, &dnsErr):
		return "name resolution"
	case errors.As(err, &opErr):
		return "connection"
	}
	return "error"
}
