// Package console serves the security team's web console: the overview,
// the bans in force with their evidence, a subject's timeline, the rules in
// force and the audit trail, and, for operators, bans, lifts and
// extensions through the limiters' admin API.
//
// Pages are rendered on the server (html/template, charts as inline SVG)
// and use no JavaScript, so the Content-Security-Policy forbids every
// script. A user logs in with a name and password from the users file
// (bcrypt); the session is a random id in a Secure, HttpOnly,
// SameSite=Strict cookie; every form carries the session's CSRF token, and
// a cross-site request is refused before it reaches a handler. Logins are
// throttled per client network and per name from that network, bcrypt runs
// a bounded number of comparisons at once, a user holds a bounded number
// of sessions and of archive reads in flight: no client, logged in or not,
// can lock a user out or take the console from the others.
package console

import (
	"context"
	"net/http"
	"net/url"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/adminclient"
	"github.com/ratewarden/ratewarden/internal/archivequery"
	"github.com/ratewarden/ratewarden/internal/clientaddr"
	"github.com/ratewarden/ratewarden/internal/event"
)

// Archive is what the console reads of the Postgres archive
// (archivequery.Reader).
type Archive interface {
	Overview(ctx context.Context, now time.Time) (archivequery.Overview, error)
	BansOf(ctx context.Context, s archivequery.Subject, from, to time.Time) ([]archivequery.Ban, error)
	Timeline(ctx context.Context, s archivequery.Subject, from, to time.Time) (archivequery.Timeline, error)
	Audit(ctx context.Context, before time.Time, limit int) ([]archivequery.AuditEntry, error)
	RuleDenials(ctx context.Context, from, to time.Time, ids []string) (map[string]int64, error)
}

// Admin is what the console needs of the limiters' admin API
// (adminclient.Client). actor is the console user, recorded with the
// action in the ban topic and the audit trail.
type Admin interface {
	Bans(ctx context.Context) ([]event.Ban, error)
	Ban(ctx context.Context, scope, subject string, d time.Duration, reason, actor string) (event.Ban, bool, error)
	Lift(ctx context.Context, scope, subject, reason, actor string) error
	Rules(ctx context.Context) (adminclient.Rules, error)
	PutRule(ctx context.Context, id string, body []byte, actor string) error
	DeleteRule(ctx context.Context, id, actor string) error
	// Mode is the decision mode of the limiter the console calls ("" when
	// it does not say).
	Mode(ctx context.Context) (string, error)
}

// Config wires the console.
type Config struct {
	Users   *Users
	Archive Archive
	Admin   Admin
	// Prometheus answers the rules' hits and the detector's lag
	// (CONSOLE_PROMETHEUS_URL); nil: the pages say how to show them.
	Prometheus Prometheus
	// PublicURL is the console's address as browsers see it, when a proxy
	// serves it (CONSOLE_PUBLIC_URL, such as https://console.example.com);
	// "": the request's Host. An unsafe request's Origin must be its
	// origin, and an https one gives the session cookie the __Host- prefix.
	PublicURL string
	// TLS: the console serves HTTPS itself (TLS_CERT_FILE), so its session
	// cookie takes the __Host- prefix as with an https PublicURL.
	TLS bool
	// Clients finds a request's client behind trusted proxies
	// (CONSOLE_TRUSTED_PROXIES), for login throttling and the log.
	Clients clientaddr.Resolver
	// SessionIdle, SessionMax and MaxSessions bound the sessions
	// (CONSOLE_SESSION_IDLE, CONSOLE_SESSION_MAX, CONSOLE_MAX_SESSIONS).
	SessionIdle time.Duration
	SessionMax  time.Duration
	MaxSessions int
	Log         *zap.Logger
	Registry    prometheus.Registerer
	// Now is the clock of sessions, login throttling and page ranges; nil:
	// time.Now.
	Now func() time.Time
}

// Login throttling: per client network and per user name from a client
// network, a burst of failures, then one more a minute; per user, a burst
// of successful logins, then one more a minute; state for at most
// maxThrottled keys each.
const (
	loginBurst    = 5
	loginRefill   = time.Minute
	startBurst    = 10
	maxThrottled  = 10_000
	defaultMaxAge = 12 * time.Hour
)

// Bounds on what one user, or unauthenticated clients together, may hold.
const (
	// maxSessionsPerUser: a user's new session past it ends that user's
	// least recently used, never another user's.
	maxSessionsPerUser = 10
	// maxReadsPerUser: a user's pages reading the archive at once.
	maxReadsPerUser = 2
	// hashQueue and hashWait bound the logins waiting for a bcrypt
	// comparison (GOMAXPROCS run at once).
	hashQueue = 16
	hashWait  = time.Second
)

// Server is the console's HTTP handler.
type Server struct {
	cfg      Config
	now      func() time.Time
	sessions *sessions
	logins   *loginThrottle // failures, by client network and by name from a network
	starts   *loginThrottle // successes, by user
	hashing  *gate
	reads    *inFlight
	origin   string // the public origin (scheme://host); "": the request's Host
	pages    *pages
	metrics  *metrics
	cookie   string
	mux      *http.ServeMux
}

// New returns the console's handler.
func New(cfg Config) *Server {
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	s := &Server{cfg: cfg, now: cfg.Now, pages: parsePages(), metrics: newMetrics(cfg.Registry), cookie: "rw_console"}
	if cfg.TLS {
		s.cookie = "__Host-rw_console"
	}
	if s.now == nil {
		s.now = time.Now
	}
	if u, err := url.Parse(cfg.PublicURL); err == nil && u.Host != "" {
		s.origin = u.Scheme + "://" + u.Host
		if u.Scheme == "https" {
			s.cookie = "__Host-rw_console"
		}
	}
	idle, maxAge := cfg.SessionIdle, cfg.SessionMax
	if maxAge <= 0 {
		maxAge = defaultMaxAge
	}
	if idle <= 0 || idle > maxAge {
		idle = maxAge
	}
	s.cfg.Admin = &live{admin: cfg.Admin, now: s.now}
	s.sessions = newSessions(max(cfg.MaxSessions, 1), maxSessionsPerUser, idle, maxAge, s.now)
	s.logins = newLoginThrottle(loginBurst, loginRefill, maxThrottled, s.now)
	s.starts = newLoginThrottle(startBurst, loginRefill, maxThrottled, s.now)
	s.hashing = newGate(runtime.GOMAXPROCS(0), hashQueue, hashWait)
	s.reads = newInFlight(maxReadsPerUser)
	s.mux = s.routes()
	return s
}

// ServeHTTP serves a request with the console's security headers, after
// refusing a cross-site one.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	securityHeaders(w.Header())
	if !sameOrigin(r, s.origin) {
		s.metrics.refused.WithLabelValues("cross_site").Inc()
		http.Error(w, "cross-site request refused", http.StatusForbidden)
		return
	}
	s.mux.ServeHTTP(w, r)
}

func (s *Server) routes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /static/console.css", serveStylesheet)
	mux.HandleFunc("GET /login", s.loginPage)
	mux.HandleFunc("POST /login", s.login)
	mux.HandleFunc("POST /logout", s.member(Viewer, s.logout))
	mux.HandleFunc("GET /", s.member(Viewer, s.reading(s.overview)))
	mux.HandleFunc("GET /bans", s.member(Viewer, s.reading(s.bans)))
	mux.HandleFunc("GET /subject", s.member(Viewer, s.reading(s.subject)))
	mux.HandleFunc("GET /rules", s.member(Viewer, s.reading(s.rules)))
	mux.HandleFunc("GET /audit", s.member(Viewer, s.reading(s.audit)))
	mux.HandleFunc("POST /bans", s.member(Operator, s.ban))
	mux.HandleFunc("POST /bans/lift", s.member(Operator, s.lift))
	mux.HandleFunc("POST /rules", s.member(Operator, s.putRule))
	mux.HandleFunc("POST /rules/delete", s.member(Operator, s.deleteRule))
	return mux
}
