// Package console assembles the security team's console: the users file,
// the read-only archive, the admin API client, and the web listener (pages
// beside /healthz, /readyz and /metrics), started in order and stopped in
// reverse. cmd/console reads the environment and handles signals; this
// package is everything else, so a test can run a console in its process.
package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/adminclient"
	"github.com/ratewarden/ratewarden/internal/archivequery"
	"github.com/ratewarden/ratewarden/internal/clientaddr"
	"github.com/ratewarden/ratewarden/internal/config"
	"github.com/ratewarden/ratewarden/internal/console"
	"github.com/ratewarden/ratewarden/internal/lifecycle"
	"github.com/ratewarden/ratewarden/internal/ops"
	"github.com/ratewarden/ratewarden/internal/promquery"
	"github.com/ratewarden/ratewarden/internal/telemetry"
)

// adminTimeout bounds one call of the admin API: a page waits no longer.
const adminTimeout = 5 * time.Second

// prometheusTimeout bounds one query of Prometheus: its figures are
// extras, and a page shows them unavailable rather than wait.
const prometheusTimeout = 2 * time.Second

// Deps are what the console takes from its host rather than from its
// configuration.
type Deps struct {
	// Log is the console's logger; required.
	Log *zap.Logger
	// Registry holds the console's metrics and is what /metrics serves;
	// required.
	Registry *prometheus.Registry
	// Now is the console's clock (sessions, page ranges). Nil: time.Now.
	Now func() time.Time
}

// App is one console, from New to the end of Run.
type App struct {
	cfg         config.Console
	log         *zap.Logger
	archive     *archivequery.Reader
	closeReader func()
	pages       *ops.Listener
	ops         *ops.Listener // nil: the operational routes are on the pages' port
	group       *lifecycle.Group
}

// New reads the users file and connects to the archive, then assembles the
// console; nothing is served before Run. ctx bounds the connection only.
// Once New has returned an App, Run must be called to release the database.
func New(ctx context.Context, cfg config.Console, deps Deps) (*App, error) {
	if deps.Log == nil || deps.Registry == nil {
		return nil, errors.New("console: a logger and a registry are required")
	}
	users, err := readUsers(cfg.UsersFile)
	if err != nil {
		return nil, err
	}
	if cfg.AdminToken == "" {
		return nil, errors.New("CONSOLE_ADMIN_TOKEN_FILE: required: the file holding the limiters' ADMIN_TOKEN")
	}
	reader, err := archivequery.Open(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	a := &App{cfg: cfg, log: deps.Log, archive: reader, closeReader: sync.OnceFunc(reader.Close)}
	var prom console.Prometheus // a nil *promquery.Client would not be a nil interface
	if cfg.PrometheusURL != "" {
		prom = promquery.New(cfg.PrometheusURL, prometheusTimeout, nil)
	}
	pages := console.New(console.Config{Users: users, Archive: reader, Prometheus: prom,
		Admin: adminclient.New(cfg.AdminURL, cfg.AdminToken, adminTimeout),
		TLS:   cfg.TLS != nil, PublicURL: cfg.PublicURL, Clients: clientaddr.Resolver{Trusted: cfg.TrustedProxies},
		SessionIdle: cfg.SessionIdle, SessionMax: cfg.SessionMax, MaxSessions: cfg.Sessions,
		Log: deps.Log, Registry: deps.Registry, Now: deps.Now})
	warnWeakUsers(deps.Log, users)
	a.listeners(pages, ops.NewHandler(ops.Config{
		Metrics: telemetry.MetricsHandler(deps.Registry),
		Probes:  []ops.Probe{{Name: "postgres", Required: true, Check: reader.Ping}},
		Log:     a.log,
	}))
	a.group = a.parts()
	return a, nil
}

// listeners makes the listeners: the pages with the operational routes
// beside them, or, with OPS_LISTEN_ADDR, the pages with /healthz only and
// the operational routes on a port of their own.
func (a *App) listeners(pages, opsRoutes http.Handler) {
	if a.cfg.OpsListenAddr == "" {
		a.pages = &ops.Listener{Var: "LISTEN_ADDR", Addr: a.cfg.ListenAddr, TLS: a.cfg.TLS, Log: a.log, Handler: ops.Beside(pages, opsRoutes)}
		return
	}
	a.pages = &ops.Listener{Var: "LISTEN_ADDR", Addr: a.cfg.ListenAddr, TLS: a.cfg.TLS, Log: a.log, Handler: ops.WithHealthz(pages)}
	a.ops = &ops.Listener{Var: "OPS_LISTEN_ADDR", Addr: a.cfg.OpsListenAddr, Log: a.log, Handler: opsRoutes}
}

// readUsers reads and parses the users file.
func readUsers(path string) (*console.Users, error) {
	if path == "" {
		return nil, errors.New("CONSOLE_USERS_FILE: required: a file of name:role:bcrypt-hash lines (see docs/console.md)")
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("CONSOLE_USERS_FILE: %w", err)
	}
	defer f.Close()
	users, err := console.ParseUsers(f)
	if err != nil {
		return nil, fmt.Errorf("CONSOLE_USERS_FILE: %s: %w", path, err)
	}
	return users, nil
}

// warnWeakUsers logs the users whose bcrypt cost is below the recommended
// one: cheap to guess from a copy of the file, and their logins are faster
// than an unknown name's, which tells their names apart.
func warnWeakUsers(log *zap.Logger, users *console.Users) {
	if weak := users.WeakUsers(); len(weak) > 0 {
		log.Warn("console users with a cheap bcrypt cost: rehash their passwords (htpasswd -nbBC 10, or console user)",
			zap.Strings("users", weak), zap.Int("recommended_cost", console.RecommendedCost))
	}
}

// parts returns the console's parts in their start order.
func (a *App) parts() *lifecycle.Group {
	g := lifecycle.New(a.log, a.cfg.ShutdownTimeout)
	g.Add(
		lifecycle.Part{Name: "postgres", Stop: func(context.Context) error { a.closeReader(); return nil }},
	)
	if a.ops != nil {
		g.Add(lifecycle.Part{Name: "ops listener", Start: a.ops.Listen, Run: a.ops.Serve, Stop: a.ops.Shutdown})
	}
	g.Add(
		lifecycle.Part{Name: "listener", Start: a.pages.Listen, Run: a.pages.Serve, Stop: a.pages.Shutdown},
		lifecycle.Part{Name: "announce", Start: func(context.Context) error {
			a.log.Info("console serving", zap.String("addr", a.Addr()), zap.String("ops_addr", a.OpsAddr()),
				zap.String("admin_api", a.cfg.AdminURL))
			return nil
		}},
	)
	return g
}

// Run serves until ctx ends or the listener fails, then stops under
// cfg.ShutdownTimeout; the database is closed last. Run is called once.
func (a *App) Run(ctx context.Context) error {
	defer a.closeReader()
	return a.group.Run(ctx)
}

// Addr returns the address the pages are served on, once Run has bound it;
// "" before. It is safe to call from any goroutine.
func (a *App) Addr() string { return a.pages.Address() }

// OpsAddr returns OPS_LISTEN_ADDR's bound address; "" before Run binds it
// or when the operational routes are on the pages' port.
func (a *App) OpsAddr() string {
	if a.ops == nil {
		return ""
	}
	return a.ops.Address()
}
