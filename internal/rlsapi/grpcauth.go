package rlsapi

import (
	"context"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// healthPrefix starts the methods of the health service, which need no
// token.
const healthPrefix = "/grpc.health.v1.Health/"

// unauthenticatedWait is how long a call without a valid token is given to
// deliver its request message, to be refused Unauthenticated then; past
// it the call ends DeadlineExceeded. A client sends its message with its
// headers: only a caller that means to hold the call open waits longer.
const unauthenticatedWait = time.Second

// unauthenticatedKey marks the context of a call admit found without a
// valid token; its value is the context.CancelFunc of the call's shortened
// deadline.
type unauthenticatedKey struct{}

// admit is the gRPC server's tap handle: it runs on a connection's reader
// as soon as a call's headers have arrived, before the call is accepted and
// before anything waits for its request message. It lets a call through
// with one of the API tokens in its authorization metadata (exactly one
// value), or to the health service, so that no one who merely reaches the
// port can spend a client's budget or have it banned.
//
// Any other call is counted, logged (sampled) and marked, and its deadline
// cut to unauthenticatedWait: the interceptors refuse it as soon as its
// message is read, and a call whose message never comes ends then rather
// than holding its headers and a goroutine until the client gives up. On
// a connection of a Listener, a call that makes more than
// maxUnauthenticatedCalls such calls, or maxHealthCalls health calls, in
// flight closes the connection.
//
// It does not refuse the call itself, though gRPC lets a tap handle do so:
// grpc-go (1.81) does not cancel the context of a call its tap refused, so
// each such call with a grpc-timeout would keep its timer and context
// (380 bytes measured) until that timeout, which the caller chooses (up to
// years); and the refusal is queued as a frame the transport does not count
// against its backlog, so a caller that sends headers without reading the
// answers would grow that queue without bound. A call let through counts
// against MaxConcurrentStreams until its answer is written, and its
// context is canceled when it ends.
func (s *Server) admit(ctx context.Context, info *tap.Info) (context.Context, error) {
	health := strings.HasPrefix(info.FullMethodName, healthPrefix)
	if !health {
		if v := info.Header["authorization"]; len(v) == 1 && s.cfg.Gate.Allows(v[0]) {
			return ctx, nil
		}
	}
	c := s.conns.of(ctx)
	if health {
		if !c.countHealth(ctx) {
			c.closeFor(closedHealthCalls)
		}
		return ctx, nil
	}
	source := ""
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		source = p.Addr.String()
	}
	s.cfg.Gate.Refused(source, info.FullMethodName)
	s.metrics.requests.WithLabelValues(domainUnknown, resultUnauthenticated).Inc()
	if !c.countUnauthenticated(ctx) {
		c.closeFor(closedUnauthenticated)
	}
	// Canceled by the interceptors, or with the call's own context when
	// the call ends.
	ctx, cancel := context.WithTimeout(ctx, unauthenticatedWait)
	return context.WithValue(ctx, unauthenticatedKey{}, cancel), nil
}

// refuseUnauthenticated returns Unauthenticated for a call admit marked.
func refuseUnauthenticated(ctx context.Context) error {
	cancel, ok := ctx.Value(unauthenticatedKey{}).(context.CancelFunc)
	if !ok {
		return nil
	}
	cancel()
	return status.Error(codes.Unauthenticated, "missing or invalid bearer token")
}

func refuseUnaryUnauthenticated(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	if err := refuseUnauthenticated(ctx); err != nil {
		return nil, err
	}
	return next(ctx, req)
}

// refuseStreamUnauthenticated covers streaming methods, of which the rate
// limit service has none today: a service added later is refused alike.
func refuseStreamUnauthenticated(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, next grpc.StreamHandler) error {
	if err := refuseUnauthenticated(ss.Context()); err != nil {
		return err
	}
	return next(srv, ss)
}
