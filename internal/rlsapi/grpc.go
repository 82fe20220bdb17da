package rlsapi

import (
	"context"
	"crypto/tls"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/ratewarden/ratewarden/internal/jsonwire"
)

// ServerOptions set the gRPC server's transport. Its bounds are what a
// caller can make the server hold before it has shown a token; see
// GRPCServer.
type ServerOptions struct {
	// TLS, when set, serves TLS (with ClientCAs and ClientAuth for mutual
	// TLS); nil serves plaintext HTTP/2.
	TLS *tls.Config
	// MaxConnectionAge and MaxConnectionAgeGrace are envoyproxy/ratelimit's
	// GRPC_MAX_CONNECTION_AGE and GRPC_MAX_CONNECTION_AGE_GRACE: a
	// connection is sent GOAWAY after about MaxConnectionAge (±10 %
	// jitter) and closed MaxConnectionAgeGrace later, so gateways
	// reconnect and spread over new limiter instances. 0: never.
	MaxConnectionAge, MaxConnectionAgeGrace time.Duration
	// MaxRecvMsgSize bounds a request message. Default DefaultMaxRecvMsgSize.
	MaxRecvMsgSize int
	// MaxConcurrentStreams bounds the calls in flight on one connection.
	// Default DefaultMaxConcurrentStreams.
	MaxConcurrentStreams uint32
	// MaxHeaderListSize bounds a call's headers (HTTP/2's
	// SETTINGS_MAX_HEADER_LIST_SIZE: the decoded names and values plus 32
	// bytes a field). Default DefaultMaxHeaderListSize.
	MaxHeaderListSize uint32
	// MaxConnectionIdle is how long a connection without a call in flight
	// stays open: then it is sent GOAWAY and closed. Default
	// DefaultMaxConnectionIdle.
	MaxConnectionIdle time.Duration
	// ConnectionTimeout bounds a new connection's TLS handshake and HTTP/2
	// preface. Default DefaultConnectionTimeout.
	ConnectionTimeout time.Duration
	// KeepaliveMinTime is the shortest interval between a client's
	// keepalive pings the server tolerates; a client pinging more often is
	// disconnected (GOAWAY too_many_pings). Default DefaultKeepaliveMinTime.
	KeepaliveMinTime time.Duration
}

// Defaults of ServerOptions.
const (
	// DefaultMaxRecvMsgSize, 64 KiB, is twice the largest request within
	// the bounds (64 descriptors of 16 entries, 16 KiB of keys and values,
	// about 32 KiB encoded with the framing of every entry): room for
	// fields Envoy may add, while a client cannot make the server buffer
	// the 4 MiB gRPC would accept by default per call before convert
	// refuses it. The same bound as a /json body: jsonwire.MaxBody.
	DefaultMaxRecvMsgSize = jsonwire.MaxBody
	// DefaultMaxConcurrentStreams, 100, bounds one connection's calls in
	// flight, and with DefaultMaxHeaderListSize what one connection can
	// make the server hold. It is the least RFC 9113 recommends, and
	// above what one gateway connection has in flight (a call takes about
	// a millisecond: 100 in flight is 100 000 calls a second on one
	// connection). Envoy opens another connection when a connection's
	// streams are all in use, so this spreads load rather than refusing
	// it (grpc-go clients queue the call instead).
	DefaultMaxConcurrentStreams = 100
	// DefaultMaxHeaderListSize, 16 KiB, is about ten times the headers of
	// Envoy's rate limit calls (pseudo-headers, content-type, te,
	// grpc-timeout, user-agent, x-envoy-* and x-forwarded-for, the
	// authorization metadata and a few initial_metadata entries: under
	// 1.5 KiB with HPACK's 32 bytes a field). Past it grpc-go resets the
	// stream without keeping the rest, and closes the connection if more
	// CONTINUATION frames follow; gRPC's own default is 16 MiB a call.
	DefaultMaxHeaderListSize = 16 << 10
	// DefaultMaxConnectionIdle: a gateway that made no call in 5 minutes
	// reconnects on its next one; an idle connection is not held longer.
	DefaultMaxConnectionIdle = 5 * time.Minute
	// DefaultConnectionTimeout bounds the handshake of a connection that
	// has not yet spoken HTTP/2 (gRPC's default is 120 s); a TLS handshake
	// across a region takes well under a second.
	DefaultConnectionTimeout = 10 * time.Second
	// DefaultKeepaliveMinTime lets gateways ping every 5 s or more: Envoy's
	// HTTP/2 connection_keepalive interval is configured per cluster, and
	// gRPC's own default (5 min) would disconnect any gateway pinging more
	// often than that.
	DefaultKeepaliveMinTime = 5 * time.Second
)

// keepalive of the server's own pings: a connection idle for serverPingAfter
// is pinged, and closed when the ping is not answered within
// serverPingTimeout, so a gateway that vanished (a host gone, a NAT entry
// dropped) does not hold its connection and streams for gRPC's default two
// hours.
const (
	serverPingAfter   = time.Minute
	serverPingTimeout = 20 * time.Second
)

// streamWorkers is how many long-lived goroutines run the calls. Without
// them gRPC starts a goroutine per call, whose stack then grows while
// decoding the request: copying stacks was 12 % of the limiter's CPU under
// load. The workers keep their grown stacks. Calls beyond them, while all
// are waiting on Redis, still get a goroutine each, so the number bounds
// nothing; it covers the calls in flight of a few busy gateways.
const streamWorkers = 256

// GRPCServer returns a gRPC server serving the rate limit service and the
// health service, with the bearer token check when Config.APITokens are
// set (see Server.admit). The caller serves it on its listener and stops
// it with GracefulStop.
//
// What a caller without a token can make the server hold, served on a
// Listener with API tokens set: per connection, at most
// maxUnauthenticatedCalls calls refused for their token, each until its
// message arrives or for unauthenticatedWait, and maxHealthCalls health
// calls (which need no token), each with at most MaxHeaderListSize of
// headers (about 275 KiB a connection at these bounds, measured); a
// connection without calls is closed after MaxConnectionIdle, one that has
// not finished its handshake after ConnectionTimeout; and the Listener
// bounds the connections. Without tokens anyone may call: a connection
// holds at most MaxConcurrentStreams calls, each until its message arrives
// or its own deadline passes.
func (s *Server) GRPCServer(opts ServerOptions) *grpc.Server {
	opts = opts.withDefaults()
	sopts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(opts.MaxRecvMsgSize),
		grpc.MaxConcurrentStreams(opts.MaxConcurrentStreams),
		grpc.MaxHeaderListSize(opts.MaxHeaderListSize),
		grpc.ConnectionTimeout(opts.ConnectionTimeout),
		grpc.NumStreamWorkers(streamWorkers),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle:     opts.MaxConnectionIdle,
			MaxConnectionAge:      opts.MaxConnectionAge, // 0: gRPC's default, infinite
			MaxConnectionAgeGrace: opts.MaxConnectionAgeGrace,
			Time:                  serverPingAfter,
			Timeout:               serverPingTimeout,
		}),
		// Envoy pings idle connections too (its keepalive is per
		// connection), hence PermitWithoutStream.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime: opts.KeepaliveMinTime, PermitWithoutStream: true,
		}),
	}
	if opts.TLS != nil {
		sopts = append(sopts, grpc.Creds(credentials.NewTLS(opts.TLS)))
	}
	if !s.cfg.Gate.Open() {
		sopts = append(sopts, grpc.InTapHandle(s.admit),
			grpc.ChainUnaryInterceptor(refuseUnaryUnauthenticated), grpc.ChainStreamInterceptor(refuseStreamUnauthenticated))
	}
	g := grpc.NewServer(sopts...)
	rlsv3.RegisterRateLimitServiceServer(g, s)
	healthgrpc.RegisterHealthServer(g, s.health)
	return g
}

func (o ServerOptions) withDefaults() ServerOptions {
	if o.MaxRecvMsgSize <= 0 {
		o.MaxRecvMsgSize = DefaultMaxRecvMsgSize
	}
	if o.MaxConcurrentStreams == 0 {
		o.MaxConcurrentStreams = DefaultMaxConcurrentStreams
	}
	if o.MaxHeaderListSize == 0 {
		o.MaxHeaderListSize = DefaultMaxHeaderListSize
	}
	if o.MaxConnectionIdle <= 0 {
		o.MaxConnectionIdle = DefaultMaxConnectionIdle
	}
	if o.ConnectionTimeout <= 0 {
		o.ConnectionTimeout = DefaultConnectionTimeout
	}
	if o.KeepaliveMinTime <= 0 {
		o.KeepaliveMinTime = DefaultKeepaliveMinTime
	}
	return o
}

// GracefulStop stops g, a server GRPCServer returned: the health service
// reports NOT_SERVING from then on (and ignores SetServing), no new calls
// are accepted, the calls in flight finish until ctx is done, and the
// remaining ones are then cut off (Stop). Health Watch streams end only
// then: a health checker that watches rather than polls keeps g until
// ctx's deadline. It returns ctx's error when it had to cut calls off.
func (s *Server) GracefulStop(ctx context.Context, g *grpc.Server) error {
	s.health.Shutdown()
	done := make(chan struct{})
	go func() {
		g.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		g.Stop()
		<-done
		return ctx.Err()
	}
}
