package rlsapi

import (
	"context"
	"crypto/tls"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// ServerOptions set the gRPC server's transport.
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
	// refuses it. The same bound as a /json body.
	DefaultMaxRecvMsgSize = 64 << 10
	// DefaultMaxConcurrentStreams bounds one connection's calls in flight;
	// Envoy opens another connection when a connection's streams are all
	// in use, so this spreads load rather than refusing it.
	DefaultMaxConcurrentStreams = 1024
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

// healthPrefix starts the methods of the health service, which need no
// token.
const healthPrefix = "/grpc.health.v1.Health/"

// GRPCServer returns a gRPC server serving the rate limit service and the
// health service, with the bearer token check when Config.APITokens are
// set. The caller serves it on its listener and stops it with
// GracefulStop.
func (s *Server) GRPCServer(opts ServerOptions) *grpc.Server {
	if opts.MaxRecvMsgSize <= 0 {
		opts.MaxRecvMsgSize = DefaultMaxRecvMsgSize
	}
	if opts.MaxConcurrentStreams == 0 {
		opts.MaxConcurrentStreams = DefaultMaxConcurrentStreams
	}
	if opts.KeepaliveMinTime <= 0 {
		opts.KeepaliveMinTime = DefaultKeepaliveMinTime
	}
	sopts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(opts.MaxRecvMsgSize),
		grpc.MaxConcurrentStreams(opts.MaxConcurrentStreams),
		grpc.NumStreamWorkers(streamWorkers),
		grpc.KeepaliveParams(keepalive.ServerParameters{
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
	if len(s.tokens) > 0 {
		sopts = append(sopts, grpc.ChainUnaryInterceptor(s.authUnary), grpc.ChainStreamInterceptor(s.authStream))
	}
	g := grpc.NewServer(sopts...)
	rlsv3.RegisterRateLimitServiceServer(g, s)
	healthgrpc.RegisterHealthServer(g, s.health)
	return g
}

func (s *Server) authUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	if err := s.authenticate(ctx, info.FullMethod); err != nil {
		return nil, err
	}
	return next(ctx, req)
}

func (s *Server) authStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, next grpc.StreamHandler) error {
	if err := s.authenticate(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return next(srv, ss)
}

// authenticate lets a call through with one of the API tokens in its
// authorization metadata (exactly one value), or to the health service, so
// that no one who merely reaches the port can spend a client's budget or
// have it banned.
func (s *Server) authenticate(ctx context.Context, method string) error {
	if strings.HasPrefix(method, healthPrefix) {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("authorization"); len(v) == 1 && s.tokens.Allows(v[0]) {
		return nil
	}
	source := ""
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		source = p.Addr.String()
	}
	// The logger samples: a flood of refusals cannot flood the log.
	s.log.Warn("rate limit call refused: missing or invalid bearer token",
		zap.String("source", source), zap.String("method", method))
	s.metrics.requests.WithLabelValues(domainUnknown, resultUnauthenticated).Inc()
	return status.Error(codes.Unauthenticated, "missing or invalid bearer token")
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
