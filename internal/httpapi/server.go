// Package httpapi serves the limiter's decision API over HTTP: POST
// /v1/check and /v1/check/batch, the outcome reports POST /v1/report and
// /v1/report/batch, envoyproxy/ratelimit's POST /json (on fasthttp,
// NewFastHandler) and forward-auth on /v1/auth (on net/http, NewHandler).
// The admin API is package adminapi's, the operational routes (health,
// readiness, metrics) package ops's.
package httpapi

import (
	"context"
	"net/http"
	"strings"
	"sync"

	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/bearer"
	"github.com/ratewarden/ratewarden/internal/clientaddr"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/jsonwire"
	"github.com/ratewarden/ratewarden/internal/limiter"
	"github.com/ratewarden/ratewarden/internal/rules"
)

// Limiter decides the checks and records the reports the API receives;
// limiter.Service is one. Each call resets and fills the decision (or the
// batch's decisions, at the index of their request) that the API encodes.
type Limiter interface {
	Check(ctx context.Context, req *rules.Request, d *limiter.Decision)
	CheckBatch(ctx context.Context, reqs []rules.Request, b *limiter.Batch)
	// ReportHold records an outcome report, and releases hold (when set)
	// on the keys of the concurrency rules the report's subject matches.
	ReportHold(ctx context.Context, req *rules.Request, status int, hold string, d *limiter.Decision)
	ReportBatch(ctx context.Context, reports []limiter.Report, b *limiter.Batch)
	// Rules is the rule set in force: forward-auth reads the X-Attr-*
	// headers of the attributes its rules key on.
	Rules() *rules.Set
}

// Config wires the handler.
type Config struct {
	// Service decides what the API is asked.
	Service Limiter
	// Clients finds the client of a forward-auth call (TRUSTED_PROXIES).
	Clients clientaddr.Resolver
	// AuthDenyStatus answers a rate-limited forward-auth call: 429 by
	// default; 403 or 401 for nginx auth_request, which accepts no other.
	AuthDenyStatus int
	// Gate admits the decision requests (API_TOKENS: 401 without one of
	// them); nil or without tokens, every caller.
	Gate *bearer.Gate
	Log  *zap.Logger
	// AnswerJSON, when set, answers the body of envoyproxy/ratelimit's
	// POST /json (rlsapi.Server.AnswerJSON): NewFastHandler serves the
	// route, behind the gate like the other decision routes.
	AnswerJSON func(ctx context.Context, body []byte) (status int, answer []byte)
}

type handler struct {
	cfg       Config
	svc       Limiter
	clients   clientaddr.Resolver
	decisions sync.Pool // *decision
	batches   sync.Pool // *batch
}

func newHandler(cfg Config) *handler {
	if cfg.AuthDenyStatus == 0 {
		cfg.AuthDenyStatus = http.StatusTooManyRequests
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	h := &handler{cfg: cfg, svc: cfg.Service, clients: cfg.Clients}
	h.decisions.New = func() any { return new(decision) }
	h.batches.New = func() any { return new(batch) }
	return h
}

// NewHandler returns forward-auth, /v1/auth and below it, and its outcome
// reports, /v1/report/auth: the routes NewFastHandler hands to net/http.
func NewHandler(cfg Config) http.Handler {
	h := newHandler(cfg)
	auth := cfg.Gate.Guard(authPath, h.auth)
	mux := http.NewServeMux()
	mux.HandleFunc(authPath, auth)
	mux.HandleFunc(authReportPath, cfg.Gate.Guard(authReportPath, h.authReport))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Below /v1/auth/ the path is the client's request path (Envoy's
		// ext_authz path_prefix): it is normalized as an endpoint, while the
		// mux would answer an unclean one ("//", "..") with a redirect that
		// the gateway hands to its client.
		if strings.HasPrefix(r.URL.Path, authPath+"/") {
			auth(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

func (h *handler) auth(w http.ResponseWriter, r *http.Request) {
	c := h.decisions.Get().(*decision)
	defer h.release(c)
	var err error
	if c.req, err = h.authRequest(r); err != nil {
		h.inputError(w, err)
		return
	}
	h.decide(w, r, c, h.authStatus)
}

// decision is what one decision reuses from the last: its request and its
// verdict. The request lives here rather than on the stack because the
// Limiter is an interface: the compiler cannot see that Check keeps no
// pointer to it, and would allocate a local request on every call.
type decision struct {
	req rules.Request
	d   limiter.Decision
	rh  rateLimitHeaders // the answer's headers: on the heap once, not per request
}

// release returns c to the pool, without its request: the pool must not
// keep the body's strings alive.
func (h *handler) release(c *decision) {
	c.req = rules.Request{}
	h.decisions.Put(c)
}

// authStatus is the forward-auth answer: 200 to let the request through,
// 403 when banned, AuthDenyStatus when rate limited.
func (h *handler) authStatus(d *limiter.Decision) int {
	switch {
	case d.Allowed:
		return http.StatusOK
	case d.Reason == event.ReasonBanned:
		return http.StatusForbidden
	default:
		return h.cfg.AuthDenyStatus
	}
}

// decide decides c's request into its decision and answers with the
// decision, its headers and the status statusOf gives it; 503 when it could
// not be decided.
func (h *handler) decide(w http.ResponseWriter, r *http.Request, c *decision, statusOf func(*limiter.Decision) int) {
	d := &c.d
	h.svc.Check(r.Context(), &c.req, d)
	if d.Unavailable {
		jsonwire.WriteJSON(w, http.StatusServiceUnavailable, unavailable(d))
		return
	}
	setRateLimitHeaders(w.Header(), d)
	if d.Hold != "" { // for a forward-auth gateway to release (authReportPath)
		w.Header().Set(headerHold, d.Hold)
	}
	buf := answers.Get().(*[]byte)
	*buf = appendDecision((*buf)[:0], d)
	jsonwire.WriteJSON(w, statusOf(d), *buf) // Write copies it into the connection's buffer
	answers.Put(buf)
}

// answers recycles the buffers decisions are encoded into.
var answers = sync.Pool{New: func() any { b := make([]byte, 0, 320); return &b }}

func (h *handler) inputError(w http.ResponseWriter, err error) {
	if err := jsonwire.WriteInputError(w, err); err != nil {
		h.cfg.Log.Error("unexpected input error", zap.Error(err))
	}
}
