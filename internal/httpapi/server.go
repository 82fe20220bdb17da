// Package httpapi serves the limiter's HTTP API: POST /v1/check, forward-auth
// on /v1/auth, health, readiness and metrics.
package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/limiter"
	"github.com/ratewarden/ratewarden/internal/rules"
)

// Probe is one dependency checked by /readyz.
type Probe struct {
	Name string
	// Required probes make the service unready when they fail; the others
	// are only reported.
	Required bool
	Check    func(ctx context.Context) error
}

// Config wires the handler.
type Config struct {
	Service        *limiter.Service
	TrustedProxies []netip.Prefix
	// AuthDenyStatus answers a rate-limited forward-auth call: 429 by
	// default; 403 or 401 for nginx auth_request, which accepts no other.
	AuthDenyStatus int
	Probes         []Probe
	Metrics        http.Handler
	Log            *zap.Logger

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
	Instances instancesFunc
	Instance  string
}

type handler struct {
	cfg        Config
	svc        *limiter.Service
	decisions  sync.Pool
	tokenSum   []byte
	adminLimit *adminLimiter
}

// NewHandler returns the limiter's routes.
func NewHandler(cfg Config) http.Handler {
	if cfg.AuthDenyStatus == 0 {
		cfg.AuthDenyStatus = http.StatusTooManyRequests
	}
	h := &handler{cfg: cfg, svc: cfg.Service}
	h.decisions.New = func() any { return new(limiter.Decision) }
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/check", h.check)
	mux.HandleFunc(authPath, h.auth)
	mux.HandleFunc("GET /healthz", healthz)
	mux.HandleFunc("GET /readyz", h.ready)
	if cfg.Metrics != nil {
		mux.Handle("GET /metrics", cfg.Metrics)
	}
	h.registerAdmin(mux)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Below /v1/auth/ the path is the client's request path (Envoy's
		// ext_authz path_prefix): it is normalized as an endpoint, while the
		// mux would answer an unclean one ("//", "..") with a redirect that
		// the gateway hands to its client.
		if strings.HasPrefix(r.URL.Path, authPath+"/") {
			h.auth(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// NewOpsHandler serves only /healthz, /readyz and /metrics: the routes of
// the services that have no API of their own (detector, archiver).
func NewOpsHandler(metrics http.Handler, probes []Probe) http.Handler {
	h := &handler{cfg: Config{Probes: probes}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", healthz)
	mux.HandleFunc("GET /readyz", h.ready)
	mux.Handle("GET /metrics", metrics)
	return mux
}

func healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, []byte("{\"status\":\"ok\"}\n"))
}

// NewServer returns an http.Server with timeouts and a header limit, so a
// slow or hostile client cannot hold a connection or memory.
func NewServer(addr string, h http.Handler, log *zap.Logger) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          zap.NewStdLog(log.Named("http")),
	}
}

func (h *handler) check(w http.ResponseWriter, r *http.Request) {
	req, err := decodeCheck(w, r)
	if err != nil {
		h.inputError(w, err)
		return
	}
	h.decide(w, r, &req, func(*limiter.Decision) int { return http.StatusOK })
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
		writeError(w, http.StatusServiceUnavailable, "rule "+d.RuleID+" cannot be decided: redis unavailable and its failure policy is deny")
		return
	}
	setRateLimitHeaders(w.Header(), d)
	writeJSON(w, statusOf(d), appendDecision(make([]byte, 0, 320), d))
}

func (h *handler) inputError(w http.ResponseWriter, err error) {
	var in *inputError
	if errors.As(err, &in) {
		writeError(w, in.status, in.msg)
		return
	}
	h.cfg.Log.Error("unexpected input error", zap.Error(err))
	writeError(w, http.StatusInternalServerError, "internal error")
}

// ready answers 200 when every required dependency answers; the body says
// which are up and, for the limiter, the service's decision mode.
func (h *handler) ready(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	type result struct {
		name string
		err  error
	}
	results := make(chan result, len(h.cfg.Probes))
	for _, p := range h.cfg.Probes {
		go func() { results <- result{p.Name, p.Check(ctx)} }()
	}
	body := struct {
		Status string            `json:"status"`
		Mode   string            `json:"mode,omitempty"` // the limiter's only
		Checks map[string]string `json:"checks"`
	}{Status: "ready", Checks: map[string]string{}}
	if h.svc != nil {
		body.Mode = h.svc.Mode()
	}
	status := http.StatusOK
	required := map[string]bool{}
	for _, p := range h.cfg.Probes {
		required[p.Name] = p.Required
	}
	for range h.cfg.Probes {
		res := <-results
		body.Checks[res.name] = "up"
		if res.err != nil {
			// The class only: the error's text can name internal addresses,
			// and /readyz may be reachable by more than the operators.
			body.Checks[res.name] = "down: " + probeErrorClass(res.err)
			if h.cfg.Log != nil {
				h.cfg.Log.Debug("readiness probe failed", zap.String("probe", res.name), zap.Error(res.err))
			}
			if required[res.name] {
				body.Status, status = "unready", http.StatusServiceUnavailable
			}
		}
	}
	b, _ := json.Marshal(body)
	writeJSON(w, status, append(b, '\n'))
}
