package rlsxds

import (
	"context"
	"crypto/tls"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/client/sotw/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ratewarden/ratewarden/internal/rlsconfig"
)

// Config wires a Source.
type Config struct {
	// ServerURL is the management server's host:port.
	ServerURL string
	// NodeID and NodeMetadata name the subscriber (node.id, string values
	// in node.metadata).
	NodeID       string
	NodeMetadata map[string]string
	// Headers are sent as gRPC metadata with the subscription.
	Headers map[string]string
	// TLS, when set, is the client's TLS; nil: plaintext.
	TLS *tls.Config
	// MaxMsgSize bounds a response (bytes); 0: gRPC's default, 4 MiB.
	MaxMsgSize int
	Backoff    Backoff
	// Apply puts a config in force, or refuses it with an error: the
	// running rules stay and the response is refused back (NACK). It
	// reports whether the rules in force changed: a config may make the
	// rules in force.
	Apply      func(*rlsconfig.Config) (bool, error)
	Log        *zap.Logger
	Registerer prometheus.Registerer
}

// Backoff is the wait before connecting again after a failure, as
// envoyproxy/ratelimit waits: Initial × Factor^attempts, drawn between
// Initial and that when Jitter, within [Initial, Max]. With its default
// factor, 0.5, every wait is Initial. Attempts count the failures since a
// response last arrived.
type Backoff struct {
	Initial, Max time.Duration
	Factor       float64
	Jitter       bool
}

// wait returns the wait after attempt failures (0: the first).
func (b Backoff) wait(attempt int, random func() float64) time.Duration {
	grown := float64(b.Initial) * math.Pow(b.Factor, float64(attempt))
	if b.Jitter && grown > float64(b.Initial) {
		grown = float64(b.Initial) + random()*(grown-float64(b.Initial))
	}
	return time.Duration(min(max(grown, float64(b.Initial)), float64(b.Max)))
}

// maxNack bounds the error text a refusal sends back.
const maxNack = 4096

// refusedPace is the least time between two NACKs of the same response:
// go-control-plane's server answers a NACK with the response refused, at
// once, and the two would otherwise exchange it as fast as they can (8 700
// times a second, a third of a core) for as long as it is published. A
// new config waits at most this long for the NACK that lets the server
// send it.
const refusedPace = 100 * time.Millisecond

// Source follows the management server (see the package comment).
type Source struct {
	cfg       Config
	first     chan struct{}
	firstOnce sync.Once

	// applied is the hash of the last response applied, refused that of
	// the last one refused in this subscription and refusal its NACK: the
	// same resources again (re-published under a new version; or sent
	// back at once after a NACK, as go-control-plane's server does) are
	// answered without loading them. Used by Run's goroutine only.
	applied, refused, refusal string
	// nacked is when the last NACK was sent, pace the least time before
	// the same response is refused again (refusedPace). Run's goroutine.
	nacked time.Time
	pace   time.Duration

	connected prometheus.Gauge
	responses *prometheus.CounterVec
	failures  prometheus.Counter
}

// New returns a Source of cfg; Run follows the server.
func New(cfg Config) *Source {
	f := promauto.With(cfg.Registerer)
	s := &Source{
		cfg:   cfg,
		first: make(chan struct{}),
		pace:  refusedPace,
		connected: f.NewGauge(prometheus.GaugeOpts{
			Name: "rate_limit_xds_connected",
			Help: "1 while the subscription to the xDS management server (CONFIG_GRPC_XDS_SERVER_URL) is open.",
		}),
		responses: f.NewCounterVec(prometheus.CounterOpts{
			Name: "rate_limit_xds_responses_total",
			Help: "RLS configs received from the xDS management server, by result (applied: ACK; unchanged: ACK, the rules in force, not applied again; refused: NACK, the running rules stayed).",
		}, []string{"result"}),
		failures: f.NewCounter(prometheus.CounterOpts{
			Name: "rate_limit_xds_connection_failures_total",
			Help: "Subscriptions to the xDS management server that failed or ended, each followed by a backoff.",
		}),
	}
	for _, result := range []string{resultApplied, resultUnchanged, resultRefused} {
		s.responses.WithLabelValues(result)
	}
	return s
}

// First is closed once the first response has been applied or refused.
func (s *Source) First() <-chan struct{} { return s.first }

// Run follows the server until ctx ends: it subscribes, applies each
// response and answers it, and after any failure subscribes again after
// the backoff, the rules in force staying meanwhile.
func (s *Source) Run(ctx context.Context) error {
	streamCtx := ctx
	if len(s.cfg.Headers) > 0 {
		streamCtx = metadata.NewOutgoingContext(ctx, metadata.New(s.cfg.Headers))
	}
	// One client for every connection: a new subscription sends the
	// version and nonce last acknowledged, as envoyproxy/ratelimit's does.
	client := sotw.NewADSClient(streamCtx, s.node(), TypeURL)
	attempt := 0
	for {
		received, err := s.session(ctx, client)
		s.connected.Set(0)
		if ctx.Err() != nil {
			return nil
		}
		if received {
			attempt = 0
		}
		s.failures.Inc()
		wait := s.cfg.Backoff.wait(attempt, rand.Float64)
		attempt++
		s.cfg.Log.Warn("xDS subscription ended; subscribing again after the backoff, the rules in force stay",
			zap.String("server", s.cfg.ServerURL), zap.Duration("backoff", wait), zap.Error(err))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// node is the subscriber's node.
func (s *Source) node() *corev3.Node {
	n := &corev3.Node{Id: s.cfg.NodeID}
	if len(s.cfg.NodeMetadata) > 0 {
		fields := make(map[string]*structpb.Value, len(s.cfg.NodeMetadata))
		for k, v := range s.cfg.NodeMetadata {
			fields[k] = structpb.NewStringValue(v)
		}
		n.Metadata = &structpb.Struct{Fields: fields}
	}
	return n
}

// session subscribes once and handles responses until the stream fails;
// it reports whether any response arrived.
func (s *Source) session(ctx context.Context, client sotw.ADSClient) (bool, error) {
	creds := insecure.NewCredentials()
	if s.cfg.TLS != nil {
		creds = credentials.NewTLS(s.cfg.TLS)
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if s.cfg.MaxMsgSize > 0 {
		opts = append(opts, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(s.cfg.MaxMsgSize)))
	}
	conn, err := grpc.NewClient(s.cfg.ServerURL, opts...)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	if err := client.InitConnect(conn, grpc.ForceCodecV2(newResponseCodec())); err != nil {
		return false, err
	}
	s.refused = "" // a refused config is tried again once per subscription
	received := false
	for {
		resp, err := client.Fetch()
		if err != nil {
			return received, err
		}
		received = true
		s.connected.Set(1)
		if err := s.handle(ctx, client, resp.Resources); err != nil {
			return received, err
		}
		s.firstOnce.Do(func() { close(s.first) })
	}
}

// Results of a response, the result label of rate_limit_xds_responses_total.
const (
	resultApplied   = "applied"
	resultUnchanged = "unchanged"
	resultRefused   = "refused"
)

// handle applies one response and answers it: ACK when applied or when it
// makes the rules in force, NACK with the reason when refused (the same
// response again, once s.pace has passed since the last NACK, or ctx
// ended). It returns the error of sending the answer.
func (s *Source) handle(ctx context.Context, client sotw.ADSClient, resources []*anypb.Any) error {
	hash := hashOf(resources)
	switch hash {
	case s.applied:
		s.responses.WithLabelValues(resultUnchanged).Inc()
		s.cfg.Log.Debug("xDS RLS config unchanged", zap.String("server", s.cfg.ServerURL))
		return client.Ack()
	case s.refused:
		s.responses.WithLabelValues(resultRefused).Inc()
		if wait := time.Until(s.nacked.Add(s.pace)); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
		}
		return s.nack(client, s.refusal)
	}
	c, err := load(resources, hash)
	changed := false
	if err == nil {
		changed, err = s.cfg.Apply(c)
	}
	if err != nil {
		// A NACK is a proto3 string: gRPC does not send one of invalid UTF-8,
		// and the subscription would end without the server learning why.
		msg := prefix(strings.ToValidUTF8(err.Error(), "\uFFFD"), maxNack)
		s.refused, s.refusal = hash, msg
		s.responses.WithLabelValues(resultRefused).Inc()
		s.cfg.Log.Error("xDS RLS config refused; the running rules stay", zap.String("server", s.cfg.ServerURL),
			zap.Int("resources", len(resources)), zap.String("error", msg))
		return s.nack(client, msg)
	}
	s.applied, s.refused = hash, ""
	if !changed {
		s.responses.WithLabelValues(resultUnchanged).Inc()
		s.cfg.Log.Debug("xDS RLS config unchanged: its rules are those in force", zap.String("server", s.cfg.ServerURL),
			zap.String("hash", hash[:12]))
		return client.Ack()
	}
	s.responses.WithLabelValues(resultApplied).Inc()
	s.cfg.Log.Info("xDS RLS config applied", zap.String("server", s.cfg.ServerURL), zap.Int("resources", len(resources)),
		zap.Int("domains", len(c.Domains)), zap.Int("rules", len(c.Rules)), zap.String("hash", hash[:12]))
	return client.Ack()
}

// nack refuses the response with msg, and notes when.
func (s *Source) nack(client sotw.ADSClient, msg string) error {
	s.nacked = time.Now()
	return client.Nack(msg)
}
