package rlsapi

import (
	"context"
	"net"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"go.uber.org/zap"
	"google.golang.org/grpc/peer"
)

// DefaultMaxConnections bounds the gRPC listener's open connections
// (Listener): Envoy opens one connection per worker thread to the rate
// limit cluster, and another when a connection's streams are all in use, so
// a fleet of 32 gateways of 16 workers uses about 512.
const DefaultMaxConnections = 1024

// Bounds of one connection's calls that carry no valid token (see admit):
// calls refused for their token that have not ended yet, and health calls
// in flight. A gateway has none of the first, and a health checker one
// health call at a time per connection (a client-side health check one
// Watch). Past either bound the connection is closed.
const (
	maxUnauthenticatedCalls = 4
	maxHealthCalls          = 4
)

// Reasons a connection is closed, the label values of
// rate_limit_rls_connections_closed_total.
const (
	closedMaxConnections  = "max_connections"
	closedUnauthenticated = "unauthenticated_calls"
	closedHealthCalls     = "health_calls"
)

// connTable is the gRPC listeners' open connections, by address, so that
// admit can find the connection a call came on.
type connTable struct {
	log    *zap.Logger
	open   prometheus.Gauge
	closed *prometheus.CounterVec

	mu    sync.Mutex
	conns map[connKey]*conn
}

// connKey identifies an open TCP connection: its two addresses.
type connKey struct{ remote, local string }

func newConnTable(reg prometheus.Registerer, log *zap.Logger) *connTable {
	f := promauto.With(reg)
	t := &connTable{
		log: log,
		open: f.NewGauge(prometheus.GaugeOpts{
			Name: "rate_limit_rls_connections",
			Help: "Open connections of the gRPC listener.",
		}),
		closed: f.NewCounterVec(prometheus.CounterOpts{
			Name: "rate_limit_rls_connections_closed_total",
			Help: "gRPC connections the limiter closed to bound what callers can make it hold, by reason: max_connections (accepted past GRPC_MAX_CONNECTIONS), unauthenticated_calls, health_calls (too many in flight on the connection).",
		}, []string{"reason"}),
		conns: map[connKey]*conn{},
	}
	for _, r := range []string{closedMaxConnections, closedUnauthenticated, closedHealthCalls} {
		t.closed.WithLabelValues(r)
	}
	return t
}

// Listener returns ln for GRPCServer's server to serve: at most max
// connections are open at once (0: DefaultMaxConnections), a connection
// accepted past it is closed at once; and a connection's requests are not
// read while an answer to it is blocked, because the caller does not read
// its answers (see conn).
func (s *Server) Listener(ln net.Listener, max int) net.Listener {
	if max <= 0 {
		max = DefaultMaxConnections
	}
	return &listener{Listener: ln, table: s.conns, max: int64(max)}
}

type listener struct {
	net.Listener
	table *connTable
	max   int64
	n     atomic.Int64 // open connections
}

func (l *listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.n.Add(1) > l.max {
			l.n.Add(-1)
			// Counted before the close, so whoever sees it closed sees it
			// counted.
			l.table.closed.WithLabelValues(closedMaxConnections).Inc()
			_ = c.Close()
			// The logger samples.
			l.table.log.Warn("grpc connection refused: GRPC_MAX_CONNECTIONS open", zap.Int64("max", l.max),
				zap.String("source", c.RemoteAddr().String()))
			continue
		}
		tc := &conn{Conn: c, table: l.table, listener: l,
			key: connKey{remote: c.RemoteAddr().String(), local: c.LocalAddr().String()}}
		tc.cond.L = &tc.mu
		l.table.add(tc)
		return tc, nil
	}
}

func (t *connTable) add(c *conn) {
	t.mu.Lock()
	t.conns[c.key] = c
	t.mu.Unlock()
	t.open.Inc()
}

func (t *connTable) remove(c *conn) {
	t.mu.Lock()
	if t.conns[c.key] == c {
		delete(t.conns, c.key)
	}
	t.mu.Unlock()
	t.open.Dec()
}

// of returns the connection of a call's context, or nil when it did not
// come through a Listener.
func (t *connTable) of(ctx context.Context) *conn {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil || p.LocalAddr == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.conns[connKey{remote: p.Addr.String(), local: p.LocalAddr.String()}]
}

// conn is a connection of a Listener. Its Read waits while one of its
// Writes is blocked: grpc-go queues an answer to every call it refuses
// early (a wrong content-type or method, say) without bounding that queue,
// so a caller that sends such calls and never reads the answers would make
// it grow by a few hundred bytes per call of five bytes until the
// connection times out (over 1 GB in 20 s, measured). Reads that wait are
// backpressure: the caller's own writes then block. A gateway reads its
// answers as they come, so its writes rarely block, and never for long.
type conn struct {
	net.Conn
	table    *connTable
	listener *listener
	key      connKey

	// Calls without a valid token in flight on the connection (admit).
	unauthenticated, health atomic.Int32

	writing atomic.Int32 // Writes in progress
	waiting atomic.Bool  // a Read waits on cond
	mu      sync.Mutex   // cond's
	cond    sync.Cond    // signaled when writing drops to 0 and on Close
	closed  bool         // under mu

	closeOnce sync.Once
	closeErr  error
}

func (c *conn) Read(b []byte) (int, error) {
	if c.writing.Load() > 0 {
		c.mu.Lock()
		c.waiting.Store(true)
		for c.writing.Load() > 0 && !c.closed {
			c.cond.Wait()
		}
		c.waiting.Store(false)
		c.mu.Unlock()
	}
	return c.Conn.Read(b)
}

func (c *conn) Write(b []byte) (int, error) {
	c.writing.Add(1)
	n, err := c.Conn.Write(b)
	if c.writing.Add(-1) == 0 && c.waiting.Load() {
		c.mu.Lock()
		c.cond.Broadcast()
		c.mu.Unlock()
	}
	return n, err
}

func (c *conn) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closed = true
		c.cond.Broadcast()
		c.mu.Unlock()
		c.closeErr = c.Conn.Close()
		c.table.remove(c)
		c.listener.n.Add(-1)
	})
	return c.closeErr
}

// countHealth counts a health call on c until ctx, the call's context,
// ends, and reports whether c is still within maxHealthCalls. c may be
// nil (a connection not from a Listener): nothing is counted.
func (c *conn) countHealth(ctx context.Context) bool {
	return c == nil || count(ctx, &c.health, maxHealthCalls)
}

// countUnauthenticated is countHealth for calls without a valid token,
// within maxUnauthenticatedCalls.
func (c *conn) countUnauthenticated(ctx context.Context) bool {
	return c == nil || count(ctx, &c.unauthenticated, maxUnauthenticatedCalls)
}

// count adds 1 to n until ctx ends (gRPC cancels a call's context when the
// call ends, whichever way) and reports whether n is within bound.
func count(ctx context.Context, n *atomic.Int32, bound int32) bool {
	within := n.Add(1) <= bound
	context.AfterFunc(ctx, func() { n.Add(-1) })
	return within
}

// closeFor closes c, counting and logging why. c may be nil.
func (c *conn) closeFor(reason string) {
	if c == nil {
		return
	}
	c.table.closed.WithLabelValues(reason).Inc()
	// The logger samples.
	c.table.log.Warn("grpc connection closed: too many calls without a token", zap.String("reason", reason),
		zap.String("source", c.key.remote))
	_ = c.Close()
}
