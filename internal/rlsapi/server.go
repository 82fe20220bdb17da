// Package rlsapi serves Envoy's rate limit API, as envoyproxy/ratelimit
// does: the gRPC service envoy.service.ratelimit.v3.RateLimitService
// (ShouldRateLimit), its grpc.health.v1 health service, and the HTTP
// POST /json endpoint. Requests are decided by the limiter's engine
// (limiter.Service.CheckDescriptors) under the descriptor rules of the rule
// set, so they share its over-limit cache, Redis round trips, failure
// policies, bans and events with /v1/check.
//
// What Envoy gets, and why:
//   - an invalid request (see Server.convert for the bounds):
//     InvalidArgument naming the field, /json 400;
//   - a rule whose on_redis_failure is deny that could not be decided:
//     Unavailable, /json 503. Envoy then applies its own failure_mode_deny
//     (false by default: the request goes through), which is the operator's
//     choice for an unreachable rate limit service; answering OVER_LIMIT
//     would deny regardless, answering OK would ignore the rule's policy;
//   - a missing or wrong bearer token, when API tokens are set:
//     Unauthenticated, /json 401; a gRPC call without one whose request
//     message has not arrived within a second: DeadlineExceeded (see
//     Server.admit and, for what a caller without a token can make the
//     server hold, Server.GRPCServer);
//   - otherwise OK or OVER_LIMIT with one status per descriptor (see
//     Server.answer); /json 200 or 429.
package rlsapi

import (
	"context"
	"sync"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/ratewarden/ratewarden/internal/bearer"
	"github.com/ratewarden/ratewarden/internal/limiter"
	"github.com/ratewarden/ratewarden/internal/rules"
)

// Checker decides a rate limit request; limiter.Service is one. After the
// call d holds the decision (CheckDescriptors resets it first).
type Checker interface {
	CheckDescriptors(ctx context.Context, req *rules.DescriptorRequest, d *limiter.Decision)
}

// Config sets the API's behaviour. The zero value is envoyproxy/ratelimit's
// default behaviour, without authentication.
type Config struct {
	// AddressKey is the descriptor key whose value is the client's address
	// (Envoy's remote_address action); the first entry with it counts.
	// The address is what bans and exemptions by address see and what
	// events carry. In limit keys every entry with this key counts as the
	// ip dimension does: an IPv6 address as its prefix (the rule's
	// ipv6_prefix, default 64). Default "remote_address".
	AddressKey string
	// EndpointKey is the descriptor key whose value is the request path
	// (Envoy's request_headers action on :path, descriptor_key path),
	// normalized as /v1/check normalizes endpoints, with what an event may
	// not carry (control characters, bytes that are not UTF-8)
	// percent-encoded rather than refused: what exemptions by endpoint see
	// and events carry; "/" without one. Default "path".
	EndpointKey string
	// MethodKey is the descriptor key whose value is the request method,
	// which events carry (upper-cased; dropped when it is not an HTTP
	// method token). Default "method".
	MethodKey string

	// ShadowMode is envoyproxy/ratelimit's SHADOW_MODE: every call is
	// decided and counted, but an overall OVER_LIMIT is answered OK (the
	// statuses still say which descriptors are over), and counted in
	// rate_limit_rls_shadow_overrides_total.
	ShadowMode bool

	// ResponseHeaders is envoyproxy/ratelimit's
	// LIMIT_RESPONSE_HEADERS_ENABLED: the response asks Envoy to add
	// LimitHeader, RemainingHeader and ResetHeader (defaults
	// RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset) to the
	// client's response, describing the descriptor with the fewest units
	// left (see Server.headers).
	ResponseHeaders                           bool
	LimitHeader, RemainingHeader, ResetHeader string

	// Gate admits the calls (gRPC metadata "authorization: Bearer
	// <token>"): the decision APIs' gate, so API_TOKENS admits a gateway on
	// every API. nil or without tokens: every caller. The health service
	// needs none: health checkers (Envoy's, the orchestrator's) carry no
	// credentials, and it tells nothing about clients.
	Gate *bearer.Gate

	// KnownDomain reports whether the rules have descriptor rules in a
	// domain; other domains are counted under the domain label _unknown.
	// Default: the checker's Rules().HasDomain when it has that method
	// (limiter.Service does), else every domain is _unknown.
	KnownDomain func(domain string) bool
	// MetricValues bounds the distinct descriptor labels one rule with
	// detailed_metric or value_to_metric levels gets; past it the rule's
	// descriptors count as "<rule id>._other". Default 100.
	MetricValues int
}

// Defaults of Config.
const (
	DefaultAddressKey      = "remote_address"
	DefaultEndpointKey     = "path"
	DefaultMethodKey       = "method"
	DefaultLimitHeader     = "RateLimit-Limit"
	DefaultRemainingHeader = "RateLimit-Remaining"
	DefaultResetHeader     = "RateLimit-Reset"
	DefaultMetricValues    = 100
)

// ServiceName is the gRPC service of Envoy's rate limit API, also a
// service name of the health service.
const ServiceName = "envoy.service.ratelimit.v3.RateLimitService"

// Server is Envoy's rate limit API over a Checker. It is safe for
// concurrent use.
type Server struct {
	cfg     Config
	checker Checker
	log     *zap.Logger
	calls   sync.Pool
	metrics *metrics
	health  *health.Server
	conns   *connTable // of the gRPC listeners (Listener)
}

var _ rlsv3.RateLimitServiceServer = (*Server)(nil)

// New returns the API deciding with checker, its metrics registered on
// reg. Its health service starts SERVING.
func New(cfg Config, checker Checker, log *zap.Logger, reg prometheus.Registerer) *Server {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&cfg.AddressKey, DefaultAddressKey)
	def(&cfg.EndpointKey, DefaultEndpointKey)
	def(&cfg.MethodKey, DefaultMethodKey)
	def(&cfg.LimitHeader, DefaultLimitHeader)
	def(&cfg.RemainingHeader, DefaultRemainingHeader)
	def(&cfg.ResetHeader, DefaultResetHeader)
	if cfg.MetricValues <= 0 {
		cfg.MetricValues = DefaultMetricValues
	}
	if cfg.KnownDomain == nil {
		if r, ok := checker.(interface{ Rules() *rules.Set }); ok {
			cfg.KnownDomain = func(d string) bool { return r.Rules().HasDomain(d) }
		} else {
			cfg.KnownDomain = func(string) bool { return false }
		}
	}
	if log == nil {
		log = zap.NewNop()
	}
	s := &Server{cfg: cfg, checker: checker, log: log, metrics: newMetrics(reg, cfg.MetricValues),
		health: health.NewServer(), conns: newConnTable(reg, log)}
	s.calls.New = func() any { return new(call) }
	s.SetServing(true)
	return s
}

// RulesReplaced tells the API that set replaced the rule set: the metric
// series of descriptors decided by rules no longer in force are deleted
// (see metrics.dropRemovedRules). Call it after the checker has set in
// force.
func (s *Server) RulesReplaced(set *rules.Set) { s.metrics.dropRemovedRules(set) }

// Health returns the health service (grpc.health.v1) that GRPCServer
// registers, for the caller to report SERVING or NOT_SERVING under the
// service names "" and ServiceName (SetServing sets both).
func (s *Server) Health() *health.Server { return s.health }

// SetServing reports the API as serving or not on the health service: for
// the overall server ("") and for ServiceName.
func (s *Server) SetServing(serving bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if serving {
		st = healthpb.HealthCheckResponse_SERVING
	}
	s.health.SetServingStatus("", st)
	s.health.SetServingStatus(ServiceName, st)
}

// ShouldRateLimit decides a call of Envoy's rate limit API.
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	return s.decide(ctx, req)
}

// decide validates in, decides it and answers it (see the package
// documentation for the error codes).
func (s *Server) decide(ctx context.Context, in *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	c := s.calls.Get().(*call)
	defer func() {
		c.release()
		s.calls.Put(c)
	}()
	domain := s.domainLabel(in.GetDomain())
	if err := s.convert(in, c); err != nil {
		s.metrics.invalid.WithLabelValues(err.field).Inc()
		s.metrics.requests.WithLabelValues(domain, resultInvalid).Inc()
		return nil, status.Error(codes.InvalidArgument, err.msg)
	}
	s.checker.CheckDescriptors(ctx, &c.req, &c.d)
	if c.d.Unavailable {
		s.metrics.requests.WithLabelValues(domain, resultUnavailable).Inc()
		return nil, status.Errorf(codes.Unavailable,
			"rule %s cannot be decided: redis unavailable and its on_redis_failure policy is deny", c.d.RuleID)
	}
	resp := s.answer(&c.req, &c.d)
	s.metrics.observe(domain, &c.req, &c.d)
	if resp.OverallCode == codeOverLimit {
		s.metrics.requests.WithLabelValues(domain, resultOverLimit).Inc()
		if s.cfg.ShadowMode {
			resp.OverallCode = codeOK
			s.metrics.shadow.Inc()
		}
	} else {
		s.metrics.requests.WithLabelValues(domain, resultOK).Inc()
	}
	return resp, nil
}

// domainLabel bounds the domain label to the domains of the rules.
func (s *Server) domainLabel(domain string) string {
	if domain != "" && s.cfg.KnownDomain(domain) {
		return domain
	}
	return domainUnknown
}
