package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// shouldRateLimit is the method of Envoy's rate limit service that gRPC
// mode calls.
const shouldRateLimit = rlsv3.RateLimitService_ShouldRateLimit_FullMethodName

// The fields of a drawn request that a descriptor entry can carry, by the
// keys Envoy's rate limit actions give them: remote_address (the client
// address), path (request_headers on :path) and method (on :method).
const (
	entryRemoteAddress = "remote_address"
	entryPath          = "path"
	entryMethod        = "method"
)

var entryKeys = []string{entryRemoteAddress, entryPath, entryMethod}

// parseEntries reads -entries: a comma-separated list of entry keys, each
// at most once.
func parseEntries(s string) ([]string, error) {
	var keys []string
	for k := range strings.SplitSeq(s, ",") {
		k = strings.TrimSpace(k)
		switch {
		case k != entryRemoteAddress && k != entryPath && k != entryMethod:
			return nil, fmt.Errorf("unknown entry %q (entries: %s)", k, strings.Join(entryKeys, ", "))
		case slices.Contains(keys, k):
			return nil, fmt.Errorf("entry %q given twice", k)
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// dialGRPC opens n client connections to addr, each its own HTTP/2
// connection, plaintext (Envoy's rate limit filter keeps a few such
// connections and multiplexes its calls over them). They connect at once,
// and after a failure again within maxBackoff.
func dialGRPC(addr string, n int, timeout time.Duration) ([]*grpc.ClientConn, error) {
	bo := backoff.DefaultConfig
	bo.MaxDelay = maxBackoff
	conns := make([]*grpc.ClientConn, 0, n)
	for range n {
		cc, err := grpc.NewClient("passthrough:///"+addr,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithConnectParams(grpc.ConnectParams{Backoff: bo, MinConnectTimeout: timeout}))
		if err != nil {
			closeGRPC(conns)
			return nil, err
		}
		cc.Connect()
		conns = append(conns, cc)
	}
	return conns, nil
}

func closeGRPC(conns []*grpc.ClientConn) {
	for _, cc := range conns {
		cc.Close()
	}
}

// grpcSender sends ShouldRateLimit calls over a connection it shares with
// other workers. Its request and response messages are reused from call
// to call: per call it allocates only the entry values that changed (the
// client address, mostly) and what grpc-go allocates itself.
type grpcSender struct {
	conn    *grpc.ClientConn
	timeout time.Duration
	md      metadata.MD // the bearer token; nil: none

	// The calls' context: the run's with the metadata, then a deadline
	// moved only once per half timeout, as the HTTP client moves its
	// connection deadline (a context per call would cost a timer each).
	parent   context.Context
	base     context.Context
	ctx      context.Context
	cancel   context.CancelFunc
	deadline time.Time

	fields []string // the key of each entry
	req    rlsv3.RateLimitRequest
	res    rlsv3.RateLimitResponse

	// With -debit-after, the descriptor's hits_addend of the check (0) and
	// of the debit that follows an admitted one; nil: a single call.
	check, debit *wrapperspb.UInt64Value
}

func newGRPCSender(conn *grpc.ClientConn, cfg *config) *grpcSender {
	s := &grpcSender{conn: conn, timeout: cfg.timeout, fields: cfg.entries}
	if cfg.token != "" {
		s.md = metadata.Pairs("authorization", "Bearer "+cfg.token)
	}
	desc := &rlcommon.RateLimitDescriptor{}
	for _, k := range cfg.entries {
		desc.Entries = append(desc.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: k})
	}
	s.req.Domain = cfg.domain
	s.req.Descriptors = []*rlcommon.RateLimitDescriptor{desc}
	if cfg.debitAfter > 0 {
		s.check, s.debit = wrapperspb.UInt64(0), wrapperspb.UInt64(cfg.debitAfter)
	}
	return s
}

// send makes one call, or with -debit-after the check and, when it is
// admitted, the debit: gRPC has no batches (draws holds one check). The
// outcome is the check's; a debit's code is not read, as Envoy ignores it.
func (s *grpcSender) send(ctx context.Context, draws []Draw, now time.Time, outs []outcome) error {
	s.fill(&draws[0])
	desc := s.req.Descriptors[0]
	desc.HitsAddend = s.check
	ctx = s.callContext(ctx, now)
	err := s.conn.Invoke(ctx, shouldRateLimit, &s.req, &s.res)
	classifyGRPC(&outs[0], s.res.GetOverallCode(), err)
	if err != nil || s.debit == nil || !outs[0].allowed {
		return err
	}
	desc.HitsAddend = s.debit
	if err := s.conn.Invoke(ctx, shouldRateLimit, &s.req, &s.res); err != nil {
		classifyGRPC(&outs[0], s.res.GetOverallCode(), err)
		return err
	}
	return nil
}

// fill sets the request message to carry d.
func (s *grpcSender) fill(d *Draw) {
	for i, e := range s.req.Descriptors[0].Entries {
		switch s.fields[i] {
		case entryRemoteAddress:
			setValue(e, d.IP)
		case entryPath:
			setValue(e, d.Endpoint)
		case entryMethod:
			e.Value = d.Method
		}
	}
	s.req.HitsAddend = uint32(d.Cost)
}

// setValue sets e's value to v, allocating only when it changed.
func setValue(e *rlcommon.RateLimitDescriptor_Entry, v []byte) {
	if e.Value != string(v) {
		e.Value = string(v)
	}
}

// callContext returns the context of a call sent at now: ctx with the
// metadata and a deadline between timeout/2 and timeout away.
func (s *grpcSender) callContext(ctx context.Context, now time.Time) context.Context {
	if ctx != s.parent {
		s.parent, s.base = ctx, ctx
		if s.md != nil {
			s.base = metadata.NewOutgoingContext(ctx, s.md)
		}
		s.deadline = time.Time{}
	}
	if s.deadline.Sub(now) < s.timeout/2 {
		if s.cancel != nil {
			s.cancel()
		}
		s.deadline = now.Add(s.timeout)
		s.ctx, s.cancel = context.WithDeadline(s.base, s.deadline)
	}
	return s.ctx
}

// interrupt does nothing: the run's context, which the calls' derive
// from, has ended them.
func (s *grpcSender) interrupt() {}

func (s *grpcSender) close() {
	if s.cancel != nil {
		s.cancel()
	}
}

// classifyGRPC turns the end of a call into an outcome: a decision from the
// overall code, or an error by status code. UNAVAILABLE and
// DEADLINE_EXCEEDED are no answer (grpc-go reports a lost connection and
// the call's deadline with them); any other status is the limiter's.
func classifyGRPC(o *outcome, overall rlsv3.RateLimitResponse_Code, err error) {
	code := status.Code(err)
	if code >= numCodes {
		code = codes.Unknown
	}
	o.code = int(code) + 1
	switch code {
	case codes.OK:
		o.answered = true
		switch overall {
		case rlsv3.RateLimitResponse_OK:
			o.allowed, o.reason = true, reasonOK
		case rlsv3.RateLimitResponse_OVER_LIMIT:
			o.allowed, o.reason = false, reasonOverLimit
		default:
			o.err = errBody
		}
	case codes.DeadlineExceeded:
		o.err = errTimeout
	case codes.Unavailable:
		o.err = errUnavail
	default:
		o.answered = true
		o.err = errGRPCStatus
	}
}

// numCodes is the number of gRPC status codes, OK (0) to UNAUTHENTICATED
// (16).
const numCodes = 17

// codeNames are the canonical names of the gRPC status codes.
var codeNames = [numCodes]string{"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
	"NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
	"ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"}
