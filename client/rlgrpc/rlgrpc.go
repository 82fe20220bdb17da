// Package rlgrpc puts a ratewarden limiter in front of a gRPC service:
// UnaryServerInterceptor and StreamServerInterceptor ask the limiter, through
// a client.Client, about every call before its handler runs, as
// client.Middleware does for net/http. It is a package of its own so that
// programs that serve no gRPC do not link gRPC and protobuf with the client.
package rlgrpc

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratewarden/ratewarden/client"
	"github.com/ratewarden/ratewarden/client/internal/clientaddr"
)

// Config says how the gRPC interceptors see a call. Every field is
// optional. The functions get the call's context and its full method name,
// "/package.Service/Method".
type Config struct {
	// TrustedProxies are the peers whose x-forwarded-for (or x-real-ip)
	// metadata names the client, as the limiter's TRUSTED_PROXIES; the
	// client is the connection's address otherwise, so a client cannot
	// pick whom it is counted as. A peer that is not an IP address (a Unix
	// socket) is counted as the unspecified address 0.0.0.0, as the
	// limiter's rate limit API counts a request without one: every such
	// caller shares its per-address budgets.
	TrustedProxies []netip.Prefix
	// User and Tier return the call's user id and tier (from a verified
	// token in its metadata, say); nil: none. The limiter folds user ids,
	// as for Middleware's User.
	User, Tier func(ctx context.Context, fullMethod string) string
	// Attributes returns the call's attributes, for rules keyed on
	// attr:<name>; nil: none.
	Attributes func(ctx context.Context, fullMethod string) map[string]string
	// Endpoint returns the endpoint the limiter sees; nil: the full method
	// name, so that rules match "/package.Service/Method".
	Endpoint func(ctx context.Context, fullMethod string) string
	// Method is the method the limiter sees; "": POST, which every gRPC
	// call is on the wire (HTTP/2).
	Method string
	// Cost returns what a call counts for at the check; nil: 1.
	Cost func(ctx context.Context, fullMethod string) int64
	// Denied returns the error that answers a refused call; a nil error
	// stands for the default. nil: codes.ResourceExhausted ("too many
	// requests"), codes.PermissionDenied ("forbidden") when banned,
	// codes.InvalidArgument when refused as invalid, codes.Unavailable when
	// its deny rule could not be decided, with the time to wait in the
	// message and as a google.rpc.RetryInfo detail. The rate-limit
	// and retry-after header metadata is set before it is called. It is
	// not called for a call whose caller had gone when the limiter failed
	// to decide it: that call ends with its context's error.
	Denied func(ctx context.Context, fullMethod string, d client.Decision) error
	// ReportIf says whether a call is reported (ReportAsync, when the
	// handler returns), given the code its client gets; nil: every call.
	// A call holding a concurrency rule's slot is released all the same,
	// in an outcome that uses nothing (see UnaryServerInterceptor).
	ReportIf func(ctx context.Context, fullMethod string, code codes.Code) bool
	// ReportCost returns the units a call used (an LLM call's tokens, which
	// the handler may leave in a holder of the context); nil: none
	// reported (the limiter counts 1).
	ReportCost func(ctx context.Context, fullMethod string, code codes.Code) int64
}

// UnaryServerInterceptor returns a gRPC interceptor that asks the limiter
// about every unary call before its handler runs, as Middleware does for
// HTTP: a refused call is answered with Denied's error (by default
// codes.ResourceExhausted, codes.PermissionDenied when banned) and never
// reaches the handler; a call gets the rate-limit headers of the limiter's
// decision, when it has some, as header metadata under lower-case keys (ratelimit-policy, ratelimit,
// x-ratelimit-limit, x-ratelimit-remaining, x-ratelimit-reset, and, when
// refused, retry-after in seconds). When the limiter cannot decide, the
// client's failure policy does, unless the call's context had ended by then
// (its deadline passed, its client cancelled): such a call ends with its
// context's error (codes.DeadlineExceeded, codes.Canceled) and never
// reaches the handler. A refusal of FailClosed is codes.ResourceExhausted
// too, as Middleware's is 429, not codes.Unavailable, which clients' retry
// policies commonly retry at once: the load would grow while the limiter
// is down. A call that a rule whose failure policy is deny refused, the
// limiter unable to decide it, ends with codes.Unavailable and a retry
// delay of a second: what the limiter answers Envoy for such a rule, and
// Middleware's 503; once it has found Redis down, the limiter answers such
// a check without a round trip to it, so a retry costs it little.
//
// When the handler returns, the call is reported without delaying its
// answer, with the HTTP status a gateway in front of the service would
// give for its code (the grpc-gateway mapping, from google.rpc.Code):
//
//	OK                                               200
//	InvalidArgument, FailedPrecondition, OutOfRange  400
//	Unauthenticated                                  401
//	PermissionDenied                                 403
//	NotFound                                         404
//	AlreadyExists, Aborted                           409
//	ResourceExhausted                                429
//	Canceled                                         499
//	Unimplemented                                    501
//	Unavailable                                      503
//	DeadlineExceeded                                 504
//	Unknown, Internal, DataLoss and the rest         500
//
// A handler's error that is no status is coded as gRPC answers it:
// context.Canceled as Canceled, context.DeadlineExceeded as
// DeadlineExceeded, anything else as Unknown. A handler that panics (a
// recovery interceptor in front answers for it) is reported as Internal.
//
// A call admitted by a concurrency rule holds a slot (Decision.Hold) while
// its handler runs: the interceptor releases it when the handler returns,
// whatever it did: returned an error, panicked (the release is queued,
// then the panic goes on), or served a caller that had cancelled (a
// handler that watches its context returns then). The release is queued
// with the report, or, when ReportIf declines the report, in a report
// without status (a release only), as client.Middleware does. A release
// that does not reach the limiter (client.Stats.HoldsLost) keeps the slot
// until the rule's hold lifetime has passed.
func UnaryServerInterceptor(c client.Limiter, cfg Config) grpc.UnaryServerInterceptor {
	in := newInterceptor(c, cfg)
	return func(ctx context.Context, r any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		var req client.Request
		// A nil ServerTransportStream (a handler called outside a server)
		// must stay a nil headerSetter.
		var hs headerSetter
		if s := grpc.ServerTransportStreamFromContext(ctx); s != nil {
			hs = s
		}
		hold, err := in.admit(ctx, info.FullMethod, hs, &req)
		if err != nil {
			return nil, err
		}
		returned := false
		defer func() { in.settle(ctx, info.FullMethod, &req, hold, err, returned) }()
		resp, err = handler(ctx, r)
		returned = true
		return resp, err
	}
}

// StreamServerInterceptor returns the stream form of
// UnaryServerInterceptor: a stream is checked once, when it opens (its
// messages are not counted), and reported once, when its handler returns.
// A stream admitted by a concurrency rule holds its slot until then.
func StreamServerInterceptor(c client.Limiter, cfg Config) grpc.StreamServerInterceptor {
	in := newInterceptor(c, cfg)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		ctx := ss.Context()
		var req client.Request
		hold, err := in.admit(ctx, info.FullMethod, ss, &req)
		if err != nil {
			return err
		}
		returned := false
		defer func() { in.settle(ctx, info.FullMethod, &req, hold, err, returned) }()
		err = handler(srv, ss)
		returned = true
		return err
	}
}

// interceptor is what the unary and the stream interceptors share.
type interceptor struct {
	c   client.Limiter
	cfg Config
	res clientaddr.Resolver
}

// headerSetter is the part of grpc.ServerStream and
// grpc.ServerTransportStream that sets the response's header metadata.
type headerSetter interface {
	SetHeader(metadata.MD) error
}

func newInterceptor(c client.Limiter, cfg Config) *interceptor {
	if cfg.Method == "" {
		cfg.Method = http.MethodPost
	}
	return &interceptor{c: c, cfg: cfg, res: clientaddr.Resolver{Trusted: cfg.TrustedProxies}}
}

// admit fills req for the call and asks the limiter about it: nil when
// the call may go on, with the hold it took (Decision.Hold), else the
// error that refuses it. The decision's headers go to hs, when there is
// one.
func (in *interceptor) admit(ctx context.Context, fullMethod string, hs headerSetter, req *client.Request) (string, error) {
	cfg := &in.cfg
	req.Endpoint, req.Method, req.IP = fullMethod, cfg.Method, unknownAddr
	if cfg.Endpoint != nil {
		req.Endpoint = cfg.Endpoint(ctx, fullMethod)
	}
	if a := in.clientOf(ctx); a.IsValid() {
		req.IP = a.String()
	}
	if cfg.User != nil {
		req.UserID = cfg.User(ctx, fullMethod)
	}
	if cfg.Tier != nil {
		req.Tier = cfg.Tier(ctx, fullMethod)
	}
	if cfg.Attributes != nil {
		req.Attributes = cfg.Attributes(ctx, fullMethod)
	}
	if cfg.Cost != nil {
		req.Cost = cfg.Cost(ctx, fullMethod)
	}
	d, _ := in.c.Check(ctx, req) // d says what to do, whatever the error
	if d.Reason == client.ReasonCallerGone {
		// Not decided, and the caller has gone: it gets its own context's
		// error, as the server would answer it, and the handler never runs.
		return "", status.FromContextError(ctx.Err()).Err()
	}
	if md := limitMetadata(&d); md != nil && hs != nil {
		_ = hs.SetHeader(md) // fails only once headers are sent, which no handler did yet
	}
	if d.Allowed {
		return d.Hold, nil
	}
	if cfg.Denied != nil {
		if err := cfg.Denied(ctx, fullMethod, d); err != nil {
			return "", err
		}
	}
	return "", deniedError(&d)
}

// clientOf is the call's client: its peer's address or, from a trusted
// proxy, the one its metadata names.
func (in *interceptor) clientOf(ctx context.Context) netip.Addr {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return netip.Addr{}
	}
	var a netip.Addr
	if tcp, ok := p.Addr.(*net.TCPAddr); ok {
		a = tcp.AddrPort().Addr().Unmap().WithZone("")
	} else {
		a = clientaddr.Parse(p.Addr.String())
	}
	if !in.res.Trusts(a) {
		return a
	}
	forwarded := metadata.ValueFromIncomingContext(ctx, "x-forwarded-for")
	var realIP string
	if len(forwarded) == 0 {
		if v := metadata.ValueFromIncomingContext(ctx, "x-real-ip"); len(v) > 0 {
			realIP = v[0]
		}
	}
	return in.res.Resolve(a, forwarded, realIP)
}

// settle queues the outcome of a call its handler answered with err, or
// panicked in (returned false: coded Internal, as recovery interceptors
// answer a panic), when ReportIf says to, and releases the call's hold, if
// it took one, either way: in the report, or else in a report without
// status, which the limiter takes as a release only, as client.Middleware
// does.
func (in *interceptor) settle(ctx context.Context, fullMethod string, req *client.Request, hold string, err error, returned bool) {
	code := codes.Internal
	if returned {
		code = codeOf(err)
	}
	o := client.Outcome{IP: req.IP, UserID: req.UserID, Endpoint: req.Endpoint, Method: req.Method, Tier: req.Tier,
		Status: httpStatusOf(code), Attributes: req.Attributes, Hold: hold}
	switch {
	case in.cfg.ReportIf == nil || in.cfg.ReportIf(ctx, fullMethod, code):
		if in.cfg.ReportCost != nil {
			o.Cost = in.cfg.ReportCost(ctx, fullMethod, code)
		}
	case hold != "":
		o.Status = 0 // a release only: no outcome
	default:
		return
	}
	in.c.ReportAsync(&o)
}

// limitMetadata returns d's rate-limit headers as metadata (nil when it
// has none), with a retry-after of its own for a refusal the limiter gave
// no headers for (a fallback's, an undecidable rule's).
func limitMetadata(d *client.Decision) metadata.MD {
	n := 0
	d.EachRateLimitHeader(func(string, string) { n++ })
	fallbackRetry := n == 0 && !d.Allowed && d.RetryAfter > 0
	if fallbackRetry {
		n = 1
	}
	if n == 0 {
		return nil
	}
	md := make(metadata.MD, n)
	values := make([]string, n) // one allocation for every value's slice
	k := 0
	d.EachRateLimitHeader(func(name, v string) {
		values[k] = v
		md[metadataKey(name)] = values[k : k+1 : k+1]
		k++
	})
	if fallbackRetry {
		values[0] = strconv.FormatInt(ceilSeconds(d.RetryAfter), 10)
		md["retry-after"] = values[:1:1]
	}
	return md
}

// limitMetadataKeys are the rate-limit headers' names as gRPC metadata
// keys, which are lower case.
var limitMetadataKeys = [...]string{"ratelimit-policy", "ratelimit", "x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset", "retry-after"}

// metadataKey is the metadata key of a rate-limit header's canonical name,
// without allocating for the names the limiter sets.
func metadataKey(name string) string {
	for _, k := range limitMetadataKeys {
		if len(k) == len(name) && strings.EqualFold(k, name) {
			return k
		}
	}
	return strings.ToLower(name)
}

// unknownAddr is the ip of a check whose client has no IP address (a peer
// on a Unix socket): the unspecified address, as the limiter's rate limit
// API counts such requests.
const unknownAddr = "0.0.0.0"

// deniedError is the default answer to a refused call (see
// Config.Denied).
func deniedError(d *client.Decision) error {
	code, msg := codes.ResourceExhausted, "too many requests"
	switch d.Reason {
	case client.ReasonBanned:
		code, msg = codes.PermissionDenied, "forbidden"
	case client.ReasonInvalid:
		code, msg = codes.InvalidArgument, "invalid request"
	case client.ReasonUndecidable:
		code, msg = codes.Unavailable, "service unavailable"
	}
	if d.RetryAfter <= 0 {
		return status.Error(code, msg)
	}
	st := status.New(code, msg+"; retry after "+strconv.FormatInt(ceilSeconds(d.RetryAfter), 10)+"s")
	if detailed, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d.RetryAfter)}); err == nil {
		st = detailed
	}
	return st.Err()
}

// ceilSeconds is d in whole seconds, rounded up, as Retry-After gives it.
func ceilSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}

// codeOf is the code a call's client gets when its handler returns err.
func codeOf(err error) codes.Code {
	if err == nil {
		return codes.OK
	}
	code := status.Code(err)
	if code == codes.Unknown {
		// As the server answers an error that is no status.
		switch {
		case errors.Is(err, context.Canceled):
			return codes.Canceled
		case errors.Is(err, context.DeadlineExceeded):
			return codes.DeadlineExceeded
		}
	}
	return code
}

// httpStatusOf is the HTTP status of a gRPC code, as grpc-gateway maps it
// (see UnaryServerInterceptor).
func httpStatusOf(code codes.Code) int {
	switch code {
	case codes.OK:
		return http.StatusOK
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange:
		return http.StatusBadRequest
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.NotFound:
		return http.StatusNotFound
	case codes.AlreadyExists, codes.Aborted:
		return http.StatusConflict
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	case codes.Canceled:
		return 499 // nginx's "client closed request", which gRPC gateways use
	case codes.Unimplemented:
		return http.StatusNotImplemented
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}
