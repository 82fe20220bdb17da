package client

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ratewarden/ratewarden/client/internal/clientaddr"
)

// MiddlewareConfig says how Middleware sees a request. Every field is
// optional.
type MiddlewareConfig struct {
	// TrustedProxies are the peers whose X-Forwarded-For (or X-Real-IP)
	// names the client, as the limiter's TRUSTED_PROXIES; the client is
	// the connection's address otherwise, so a client cannot pick whom it
	// is counted as.
	TrustedProxies []netip.Prefix
	// User and Tier return the request's user id and tier (from its
	// session, a verified token); nil: none. The limiter folds user ids
	// (Dave is dave): where two accounts differ only so, return an id
	// unique as it compares them (the account's number, say).
	User, Tier func(*http.Request) string
	// Attributes returns the request's attributes, for rules keyed on
	// attr:<name>; nil: none.
	Attributes func(*http.Request) map[string]string
	// Endpoint returns the endpoint the limiter sees. nil: the route's
	// pattern when a Go 1.22+ http.ServeMux routes the request (the
	// pattern r.Pattern holds behind the mux, or Mux's for the request
	// when the middleware wraps the mux), its method and host left out
	// ("/api/books/{id}"), so that every book counts as one endpoint; else
	// the URL's path, as sent (URL.EscapedPath), which the limiter
	// normalizes as it does a gateway's.
	Endpoint func(*http.Request) string
	// Mux is the ServeMux the middleware wraps, if it does: its pattern
	// for a request is found before it routes it.
	Mux *http.ServeMux
	// Cost returns what a request counts for at the check; nil: 1.
	Cost func(*http.Request) int64
	// Denied answers a refused request. nil: 429 Too Many Requests (403
	// Forbidden when banned, 400 Bad Request when refused as invalid, 503
	// Service Unavailable when its deny rule could not be decided) with a
	// JSON body {"error": ...}; the RateLimit and Retry-After headers are
	// set before it is called. It is not called for a request whose client
	// had gone when the limiter failed to decide it (answered 503).
	Denied func(w http.ResponseWriter, r *http.Request, d Decision)
	// ReportIf says whether a response is reported (ReportAsync, after
	// the handler, off the response's path); nil: every response.
	// NeverReport turns reports off. A request holding a concurrency
	// rule's slot is released all the same, in an outcome that uses
	// nothing (see Middleware).
	ReportIf func(r *http.Request, status int) bool
	// ReportCost returns the units a response used (an LLM call's
	// tokens: the handler may leave them in a header of its own, h);
	// nil: none reported (the limiter counts 1).
	ReportCost func(r *http.Request, status int, h http.Header) int64
}

// NeverReport is a MiddlewareConfig.ReportIf that reports nothing.
func NeverReport(*http.Request, int) bool { return false }

// Middleware returns net/http middleware that asks the limiter about
// every request before next serves it: a refused request is answered 429
// (403 when banned, 400 when the limiter refused it as invalid, 503 when a
// rule whose failure policy is deny could not be decided, as the limiter's
// forward auth answers it) with Retry-After and never reaches next; an
// allowed one gets the limiter's RateLimit headers. When the limiter
// cannot decide, the client's failure policy does, unless the request's
// context had ended by then (net/http ends it when the client closes or
// half-closes its connection): such a request is answered 503 and never
// reaches next. After next, the response's status (and cost) is reported
// without delaying the response. c is a *Client, or, in an application's
// tests, a clienttest.Fake.
//
// A request admitted by a concurrency rule holds a slot (Decision.Hold)
// while next serves it. The middleware releases it when next returns,
// whatever next did: returned, panicked (the release is queued, then the
// panic goes on), hijacked the connection, or served a client that had
// hung up (a handler that watches r.Context() returns then). The release
// is queued with the report (ReportAsync), or, when ReportIf declines the
// report, in a report without status, which the limiter takes as a
// release only (no outcome, nothing spent). A handler that panics
// before writing a status is reported with 500. A release that does not
// reach the limiter (Stats.HoldsLost) keeps the slot until the rule's hold
// lifetime has passed.
func Middleware(c Limiter, cfg MiddlewareConfig) func(http.Handler) http.Handler {
	res := clientaddr.Resolver{Trusted: cfg.TrustedProxies}
	recorders := sync.Pool{New: func() any { return new(statusRecorder) }}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			req := Request{Endpoint: endpointOf(&cfg, r), Method: r.Method, IP: unknownAddr}
			if a := res.Of(r); a.IsValid() {
				req.IP = a.String()
			}
			if cfg.User != nil {
				req.UserID = cfg.User(r)
			}
			if cfg.Tier != nil {
				req.Tier = cfg.Tier(r)
			}
			if cfg.Attributes != nil {
				req.Attributes = cfg.Attributes(r)
			}
			if cfg.Cost != nil {
				req.Cost = cfg.Cost(r)
			}
			d, _ := c.Check(r.Context(), &req) // d says what to do, whatever the error
			if d.Reason == ReasonCallerGone {
				// Not decided, and nobody waits for the answer: nothing is
				// served, and the failure policy is not asked.
				writeError(w, http.StatusServiceUnavailable, `{"error":"service unavailable"}`)
				return
			}
			h := w.Header()
			d.headers.setOn(h)
			if !d.Allowed {
				if d.headers.all == "" && d.RetryAfter > 0 { // a fallback's or an undecidable rule's refusal
					h["Retry-After"] = []string{strconv.FormatInt(int64((d.RetryAfter+time.Second-1)/time.Second), 10)}
				}
				if cfg.Denied != nil {
					cfg.Denied(w, r, d)
				} else {
					denied(w, d)
				}
				return
			}
			rec := recorders.Get().(*statusRecorder)
			rec.ResponseWriter, rec.status = w, 0
			returned := false
			// Deferred, so that the request's hold is released whatever the
			// handler did: returned, panicked (the panic goes on once the
			// release is queued), served a client that had gone.
			defer func() {
				status := rec.status
				switch {
				case status != 0:
				case returned:
					status = http.StatusOK
				default:
					status = http.StatusInternalServerError // a panic before any status
				}
				if returned {
					rec.ResponseWriter = nil
					recorders.Put(rec) // not one a panicking handler's goroutines may still use
				}
				settle(c, &cfg, r, w.Header(), &req, d.Hold, status)
			}()
			next.ServeHTTP(rec, r)
			returned = true
		})
	}
}

// settle reports the outcome of an admitted request whose client got
// status, when cfg.ReportIf says to, and releases its hold, if it took one,
// either way: in the report, or else in a release of its own (see
// releaseOf). Both are queued (ReportAsync), never sent on the
// response's path.
func settle(c Limiter, cfg *MiddlewareConfig, r *http.Request, h http.Header, req *Request, hold string, status int) {
	if cfg.ReportIf != nil && !cfg.ReportIf(r, status) {
		if hold != "" {
			o := releaseOf(req, hold)
			c.ReportAsync(&o)
		}
		return
	}
	o := Outcome{IP: req.IP, UserID: req.UserID, Endpoint: req.Endpoint, Method: req.Method, Tier: req.Tier,
		Status: status, Attributes: req.Attributes, Hold: hold}
	if cfg.ReportCost != nil {
		o.Cost = cfg.ReportCost(r, status, h)
	}
	c.ReportAsync(&o)
}

// releaseOf is the outcome that releases hold, the hold of req's check,
// for an application that asked for no report of the request: a report
// without status, which the limiter takes as a release only (no outcome
// event, no budget spent).
func releaseOf(req *Request, hold string) Outcome {
	return Outcome{IP: req.IP, UserID: req.UserID, Endpoint: req.Endpoint, Method: req.Method, Tier: req.Tier,
		Attributes: req.Attributes, Hold: hold}
}

// endpointOf returns the endpoint of r as cfg says (see
// MiddlewareConfig.Endpoint).
func endpointOf(cfg *MiddlewareConfig, r *http.Request) string {
	if cfg.Endpoint != nil {
		return cfg.Endpoint(r)
	}
	pattern := r.Pattern
	if pattern == "" && cfg.Mux != nil {
		_, pattern = cfg.Mux.Handler(r)
	}
	// "[METHOD ][HOST]/PATH": the path is from the first '/'.
	if i := strings.IndexByte(pattern, '/'); i >= 0 {
		return pattern[i:]
	}
	// The path as sent (its escapes kept), which the limiter decodes once
	// as it does a gateway's; "/" for a request without one (CONNECT).
	if p := r.URL.EscapedPath(); p != "" {
		return p
	}
	return "/"
}

// unknownAddr is the ip of a check whose client has no IP address (a peer
// on a Unix socket): the unspecified address, as the limiter's rate limit
// API counts such requests. The limiter refuses a check without one.
const unknownAddr = "0.0.0.0"

// denied answers a refused request: 403 when banned, 400 when the limiter
// refused it as invalid, 503 when its deny rule could not be decided, else
// 429.
func denied(w http.ResponseWriter, d Decision) {
	switch d.Reason {
	case ReasonBanned:
		writeError(w, http.StatusForbidden, `{"error":"forbidden"}`)
	case ReasonInvalid:
		writeError(w, http.StatusBadRequest, `{"error":"bad request"}`)
	case ReasonUndecidable:
		writeError(w, http.StatusServiceUnavailable, `{"error":"service unavailable"}`)
	default:
		writeError(w, http.StatusTooManyRequests, `{"error":"too many requests"}`)
	}
}

func writeError(w http.ResponseWriter, status int, body string) {
	w.Header()["Content-Type"] = []string{"application/json"}
	w.WriteHeader(status)
	_, _ = w.Write([]byte(body))
}

// statusRecorder remembers the status a handler writes. It passes Flush,
// Hijack and the http.ResponseController methods (Unwrap) through.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		if s.status == 0 {
			s.status = http.StatusOK
		}
		f.Flush()
	}
}

func (s *statusRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if h, ok := s.ResponseWriter.(http.Hijacker); ok {
		return h.Hijack()
	}
	return nil, nil, errors.New("ratewarden middleware: the ResponseWriter cannot be hijacked")
}

// Unwrap gives http.ResponseController the writer underneath.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }
