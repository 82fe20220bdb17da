// Package httpapi serves the limiter's HTTP API: POST /v1/check (on
// fasthttp, NewFastHandler), forward-auth on /v1/auth and the admin API (on
// net/http, NewHandler). The operational routes (health, readiness,
// metrics) are package ops's.
package httpapi

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/bearer"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/jsonwire"
	"github.com/ratewarden/ratewarden/internal/limiter"
	"github.com/ratewarden/ratewarden/internal/rules"
)

// Config wires the handler.
type Config struct {
	Service        *limiter.Service
	TrustedProxies []netip.Prefix
	// AuthDenyStatus answers a rate-limited forward-auth call: 429 by
	// default; 403 or 401 for nginx auth_request, which accepts no other.
	AuthDenyStatus int
	// APITokens, when any, are the bearer tokens a decision request
	// (/v1/check, /v1/auth) must carry: 401 without one of them.
	APITokens []string
	Log       *zap.Logger

	// AdminToken enables the admin API (bearer token); empty disables it.
	AdminToken   string
	Blacklist    Blacklist
	BanPublisher BanPublisher
	// Bans, when set, learns admin bans at once (others learn them through
	// the blacklist's change notifications).
	Bans *limiter.BanSet
	// Rules, when set, serves the dynamic rules of the admin API; Instances
	// lists the live limiters with their rule-set versions; Instance names
	// this one in the audit trail.
	Rules     RuleAdmin
	Instances func(ctx context.Context, now time.Time) ([]LiveInstance, error)
	Instance  string
	// AnswerJSON, when set, answers the body of envoyproxy/ratelimit's
	// POST /json (rlsapi.Server.AnswerJSON): NewFastHandler serves the
	// route, behind the API tokens like the other decision routes.
	AnswerJSON func(ctx context.Context, body []byte) (status int, answer []byte)
}

type handler struct {
	cfg         Config
	svc         *limiter.Service
	decisions   sync.Pool // *limiter.Decision
	batches     sync.Pool // *batch
	adminTokens bearer.Tokens
	adminLimit  *adminLimiter
}

func newHandler(cfg Config) *handler {
	if cfg.AuthDenyStatus == 0 {
		cfg.AuthDenyStatus = http.StatusTooManyRequests
	}
	h := &handler{cfg: cfg, svc: cfg.Service}
	h.decisions.New = func() any { return new(limiter.Decision) }
	h.batches.New = func() any { return new(batch) }
	return h
}

// NewHandler returns the limiter's net/http routes: every route but
// POST /v1/check, /v1/check/batch and /json, which NewFastHandler serves in
// front of them.
func NewHandler(cfg Config) http.Handler {
	h := newHandler(cfg)
	auth := h.auth
	if len(cfg.APITokens) > 0 {
		auth = h.callers(bearer.New(cfg.APITokens...), authPath, auth)
	}
	mux := http.NewServeMux()
	mux.HandleFunc(authPath, auth)
	h.registerAdmin(mux)
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

// callers lets a decision request through to next only with one of the
// API tokens, so that no one who merely reaches the port can spend a
// client's budget or have it banned. route names it in the log (the path
// below /v1/auth/ is the client's).
func (h *handler) callers(tokens bearer.Tokens, route string, next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !tokens.AllowsRequest(r) {
			// The logger samples: a flood of refusals cannot flood the log.
			h.cfg.Log.Warn("decision request refused: missing or invalid bearer token",
				zap.String("source", r.RemoteAddr), zap.String("route", route))
			unauthorized(w, "ratewarden", "missing or invalid bearer token")
			return
		}
		next(w, r)
	}
}

func (h *handler) auth(w http.ResponseWriter, r *http.Request) {
	req, err := h.authRequest(r)
	if err != nil {
		h.inputError(w, err)
		return
	}
	h.decide(w, r, &req, h.authStatus)
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

// decide decides req and answers with the decision, its headers and the
// status statusOf gives it; 503 when it could not be decided.
func (h *handler) decide(w http.ResponseWriter, r *http.Request, req *rules.Request, statusOf func(*limiter.Decision) int) {
	d := h.decisions.Get().(*limiter.Decision)
	defer h.decisions.Put(d)
	h.svc.Check(r.Context(), req, d)
	if d.Unavailable {
		jsonwire.WriteError(w, http.StatusServiceUnavailable, unavailable(d))
		return
	}
	setRateLimitHeaders(w.Header(), d)
	buf := answers.Get().(*[]byte)
	*buf = appendDecision((*buf)[:0], d)
	jsonwire.WriteJSON(w, statusOf(d), *buf) // Write copies it into the connection's buffer
	answers.Put(buf)
}

// answers recycles the buffers decisions are encoded into.
var answers = sync.Pool{New: func() any { b := make([]byte, 0, 320); return &b }}

func (h *handler) inputError(w http.ResponseWriter, err error) {
	var in *inputError
	if errors.As(err, &in) {
		jsonwire.WriteError(w, in.status, in.msg)
		return
	}
	h.cfg.Log.Error("unexpected input error", zap.Error(err))
	jsonwire.WriteError(w, http.StatusInternalServerError, "internal error")
}
