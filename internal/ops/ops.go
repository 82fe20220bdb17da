// Package ops serves what operators and their tools ask of every ratewarden
// process: /healthz, /readyz (each dependency's state, by error class),
// /metrics and the runtime profiles; and the HTTP server settings and the
// listener every HTTP port of ratewarden uses, the limiter's decision port
// included.
package ops

import (
	"net/http"
	"strings"

	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/jsonwire"
)

// Config is what the operational routes serve.
type Config struct {
	// Metrics serves /metrics (telemetry.MetricsHandler).
	Metrics http.Handler
	// Probes are the dependencies /readyz checks.
	Probes []Probe
	// Details, when set, adds its fields to the /readyz body, between
	// "status" and "checks": the limiter's decision mode and the state of
	// its dynamic rules.
	Details func() map[string]string
	// Profiles adds the runtime profiles under /debug/pprof/.
	Profiles bool
	// Log gets the failed probes at debug level; nil: none.
	Log *zap.Logger
}

// NewHandler returns the operational routes: /healthz, /readyz, /metrics
// and, with Profiles, /debug/pprof/.
func NewHandler(cfg Config) http.Handler {
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", Healthz)
	mux.Handle("GET /readyz", &readiness{probes: cfg.Probes, details: cfg.Details, log: cfg.Log})
	if cfg.Metrics != nil {
		mux.Handle("GET /metrics", cfg.Metrics)
	}
	if cfg.Profiles {
		mux.Handle("/debug/pprof/", ProfileHandler())
	}
	return mux
}

// Healthz answers 200 while the process runs.
func Healthz(w http.ResponseWriter, _ *http.Request) {
	jsonwire.WriteJSON(w, http.StatusOK, []byte("{\"status\":\"ok\"}\n"))
}

// Beside serves ops's routes and api's on one listener: /healthz, /readyz,
// /metrics and /debug/pprof/ go to ops, every other path to api as it came.
// (A ServeMux in front would answer an unclean path such as /v1/auth//x
// with a redirect before api saw it.)
func Beside(api, ops http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isOpsPath(r.URL.Path) {
			ops.ServeHTTP(w, r)
			return
		}
		api.ServeHTTP(w, r)
	})
}

// WithHealthz serves /healthz beside api: a gateway's health check of the
// decision port keeps working when the other operational routes have a
// listener of their own. It says only that the process runs.
func WithHealthz(api http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
			Healthz(w, r)
			return
		}
		api.ServeHTTP(w, r)
	})
}

func isOpsPath(p string) bool {
	switch p {
	case "/healthz", "/readyz", "/metrics":
		return true
	}
	return strings.HasPrefix(p, profilePrefix)
}
