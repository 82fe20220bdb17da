// Package adminapi serves the limiter's admin API on the decision port:
// manual bans and unbans through the detector's path (GET, POST
// /v1/admin/bans, DELETE /v1/admin/bans/{scope}/{subject}) and the dynamic
// rules (GET /v1/admin/rules, PUT and DELETE /v1/admin/rules/{id}, PUT
// /v1/admin/rules/{id}/shadow). Every call is throttled per source, then
// needs the admin token, and is logged with its source and actor.
package adminapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/bearer"
	"github.com/ratewarden/ratewarden/internal/clientaddr"
	"github.com/ratewarden/ratewarden/internal/jsonwire"
	"github.com/ratewarden/ratewarden/internal/limiter"
)

// Prefix is the path under which the admin API serves every route.
const Prefix = "/v1/admin/"

// Config wires the admin API.
type Config struct {
	// Gate admits the admin token (ADMIN_TOKEN); it must have one.
	Gate *bearer.Gate
	// Clients finds a call's client (TRUSTED_PROXIES), which is throttled
	// and recorded in logs and the audit trail.
	Clients      clientaddr.Resolver
	Blacklist    Blacklist
	BanPublisher BanPublisher
	// Bans, when set, learns admin bans at once (others learn them through
	// the blacklist's change notifications).
	Bans *limiter.BanSet
	// BanGrouping is the IPv6 grouping of ban subjects, the rules file's
	// detection.ipv6_prefix, read at each call; nil: the default, 64.
	BanGrouping func() int
	// UserKey is the key of a user id, the subject of a user ban: the
	// rule set's (rules.Set.UserKey), which the limiters' lookups and the
	// detector use too; nil: the id as sent.
	UserKey func(string) string
	// Rules, when set, serves the dynamic rules; Instances lists the live
	// limiters with their rule-set versions; Instance names this one in the
	// audit trail.
	Rules     RuleAdmin
	Instances func(ctx context.Context, now time.Time) ([]LiveInstance, error)
	Instance  string
	Log       *zap.Logger
}

type handler struct {
	cfg   Config
	limit *sourceLimiter
}

// New returns the admin API's routes, all below Prefix.
func New(cfg Config) http.Handler {
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	h := &handler{cfg: cfg, limit: newSourceLimiter(sourceRate, sourceBurst, maxSources, time.Now)}
	return h.routes()
}

// Beside serves admin's paths (below Prefix) and api's on one listener:
// every path not below Prefix goes to api as it came (a ServeMux in front
// would answer an unclean path, such as forward-auth's /v1/auth//x, with a
// redirect before api saw it).
func Beside(api, admin http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, Prefix) {
			admin.ServeHTTP(w, r)
			return
		}
		api.ServeHTTP(w, r)
	})
}

func (h *handler) routes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/admin/bans", h.authorized(h.listBans))
	mux.HandleFunc("POST /v1/admin/bans", h.authorized(h.addBan))
	mux.HandleFunc("DELETE /v1/admin/bans/{scope}/{subject...}", h.authorized(h.removeBan))
	if h.cfg.Rules != nil {
		mux.HandleFunc("GET /v1/admin/rules", h.authorized(h.listRules))
		mux.HandleFunc("PUT /v1/admin/rules/{id}", h.authorized(h.putRule))
		mux.HandleFunc("DELETE /v1/admin/rules/{id}", h.authorized(h.deleteRule))
		mux.HandleFunc("PUT /v1/admin/rules/{id}/shadow", h.authorized(h.shadowRule))
	}
	return mux
}

// authorized rate-limits the source, then lets the call through the gate
// (the token, checked in constant time). The limit comes first so it also
// bounds token guessing.
func (h *handler) authorized(next http.HandlerFunc) http.HandlerFunc {
	guarded := h.cfg.Gate.Guard("/v1/admin", next)
	return func(w http.ResponseWriter, r *http.Request) {
		source := h.cfg.Clients.Of(r)
		if wait, first := h.limit.allow(source); wait > 0 {
			if first { // once per burst of refusals, so a flood cannot flood the log
				h.cfg.Log.Warn("admin request refused: rate limited", zap.String("source", r.RemoteAddr),
					zap.String("client", source.String()), zap.String("path", r.URL.Path))
			}
			w.Header().Set("Retry-After", strconv.FormatInt(int64((wait+time.Second-1)/time.Second), 10))
			jsonwire.WriteError(w, http.StatusTooManyRequests, "admin API: too many requests")
			return
		}
		guarded(w, r)
	}
}

// inputError answers err (jsonwire.WriteInputError).
func (h *handler) inputError(w http.ResponseWriter, err error) {
	if err := jsonwire.WriteInputError(w, err); err != nil {
		h.cfg.Log.Error("unexpected input error", zap.Error(err))
	}
}

// jsonError maps an encoding/json decoding error of a body to its answer.
func jsonError(err error) error {
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return &jsonwire.InputError{Status: http.StatusRequestEntityTooLarge, Msg: fmt.Sprintf("request body larger than %d bytes", jsonwire.MaxBody)}
	case errors.Is(err, io.EOF):
		return jsonwire.BadRequest("invalid JSON: empty body")
	}
	return jsonwire.BadRequest("invalid JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
}
