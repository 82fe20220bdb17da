package limiter

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/ratewarden/ratewarden/internal/adminapi"
	"github.com/ratewarden/ratewarden/internal/config"
	"github.com/ratewarden/ratewarden/internal/instancefile"
	"github.com/ratewarden/ratewarden/internal/lifecycle"
	"github.com/ratewarden/ratewarden/internal/limiter"
	"github.com/ratewarden/ratewarden/internal/ops"
	"github.com/ratewarden/ratewarden/internal/pgrules"
	"github.com/ratewarden/ratewarden/internal/pgstore"
	"github.com/ratewarden/ratewarden/internal/redisfleet"
	"github.com/ratewarden/ratewarden/internal/rlsapi"
	"github.com/ratewarden/ratewarden/internal/rlsxds"
	"github.com/ratewarden/ratewarden/internal/rulesync"
)

// warnIfOpen warns that anyone who reaches the decision port may ask for
// decisions: spend any client's budget, or name a victim in enough checks to
// have it banned.
func warnIfOpen(cfg config.Limiter, log *zap.Logger) {
	if len(cfg.APITokens) == 0 && cfg.TLSFiles.ClientCAFile == "" {
		log.Warn("decisions are open to every caller that reaches LISTEN_ADDR: set API_TOKENS (or TLS_CLIENT_CA_FILE) "+
			"so that only the gateways may spend clients' budgets or get them banned (docs/security.md)",
			zap.String("addr", cfg.ListenAddr))
	}
}

// rulesPart loads the rules (an error stops the start: there is nothing to
// run), then keeps them current until it is stopped; a signal on reload
// reads the file and the RLS directory again at once.
func rulesPart(mgr *rulesync.Manager, reload <-chan os.Signal) lifecycle.Part {
	return lifecycle.Part{
		Name:  "rules",
		Start: mgr.Start,
		Run:   func(ctx context.Context) error { mgr.Run(ctx, reload); return nil },
	}
}

// xdsPart follows the xDS management server for the RLS config
// (CONFIG_TYPE=GRPC_XDS_SOTW). Like envoyproxy/ratelimit it holds the start
// until the first config has been applied or refused, retrying with its
// backoff, unless FORCE_START_WITHOUT_INITIAL_CONFIG; SIGTERM ends the wait.
func xdsPart(cfg config.XDS, mgr *rulesync.Manager, log *zap.Logger, reg prometheus.Registerer) lifecycle.Part {
	src := rlsxds.New(rlsxds.Config{
		ServerURL: cfg.ServerURL, NodeID: cfg.NodeID, NodeMetadata: cfg.NodeMetadata, Headers: cfg.Headers,
		TLS: cfg.TLS, MaxMsgSize: cfg.MaxMsgSize,
		Backoff: rlsxds.Backoff{Initial: cfg.BackoffInitial, Max: cfg.BackoffMax, Factor: cfg.BackoffFactor, Jitter: cfg.BackoffJitter},
		Apply:   mgr.SetRLS, Log: log, Registerer: reg,
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	return lifecycle.Part{
		Name: "xds rls config",
		Start: func(start context.Context) error {
			go func() { defer close(done); _ = src.Run(ctx) }()
			if cfg.ForceStart {
				return nil
			}
			log.Info("waiting for the first RLS config from the xDS server", zap.String("server", cfg.ServerURL), zap.String("node", cfg.NodeID))
			select {
			case <-src.First():
				return nil
			case <-start.Done(): // told to stop while waiting: a stop, not a failure
				cancel()
				<-done
				return nil
			}
		},
		Stop: func(context.Context) error { cancel(); <-done; return nil },
	}
}

// dynamicRulesState is the dynamic_rules field of the limiter's /readyz:
// "ok", or "refused version N" when this limiter refused the store's
// dynamic rules (they do not fit its files) and runs without them. It is
// reported, never making the limiter unready: the rules it runs are valid
// ones it decides on, as after a restart. /readyz names the version only;
// GET /v1/admin/rules says why.
func dynamicRulesState(v *rulesync.View) string {
	if v == nil || v.DynamicRefused == nil {
		return "ok"
	}
	return fmt.Sprintf("refused version %d", v.DynamicRefused.Version)
}

// listenerPart serves l from its start: the lifecycle of every listener.
func listenerPart(name string, l *ops.Listener) lifecycle.Part {
	return lifecycle.Part{Name: name, Start: l.Listen, Run: l.Serve, Stop: l.Shutdown}
}

// ruleStore opens the dynamic rule store, creating the database and schema
// if need be (as the archiver does; migrations take a lock), or returns nil
// when DYNAMIC_RULES is off.
func ruleStore(cfg config.Limiter) func(context.Context) (rulesync.Store, error) {
	if !cfg.DynamicRules {
		return nil
	}
	return func(ctx context.Context) (rulesync.Store, error) {
		store, err := pgstore.OpenMigrated(ctx, cfg.DatabaseURL, nil)
		if err != nil {
			return nil, err
		}
		return pgrules.New(store), nil
	}
}

// liveInstances lists the live limiters for the admin API.
func liveInstances(hb *redisfleet.Heartbeats) func(context.Context, time.Time) ([]adminapi.LiveInstance, error) {
	return func(ctx context.Context, now time.Time) ([]adminapi.LiveInstance, error) {
		list, err := hb.Instances(ctx, now)
		out := make([]adminapi.LiveInstance, len(list))
		for i, in := range list {
			out[i] = adminapi.LiveInstance{ID: in.ID, LastSeen: in.LastSeen, RulesVersion: in.Rules.Version, RulesAppliedAt: in.Rules.AppliedAt}
		}
		return out, err
	}
}

// grpcPart serves Envoy's rate limit API on GRPC_LISTEN_ADDR. Like the HTTP
// listeners it opens only once the warm-up has ended; at shutdown its
// health turns NOT_SERVING and the calls in flight finish, within the
// shutdown deadline. Its listener bounds the open connections to maxConns
// (rlsapi.Server.Listener).
type grpcPart struct {
	addr     string
	maxConns int
	rls      *rlsapi.Server
	server   *grpc.Server
	ln       net.Listener
}

func (p *grpcPart) part() lifecycle.Part {
	return lifecycle.Part{
		Name: "grpc listener",
		Start: func(ctx context.Context) error {
			var lc net.ListenConfig
			ln, err := lc.Listen(ctx, "tcp", p.addr)
			if err != nil {
				return fmt.Errorf("GRPC_LISTEN_ADDR %s: %w", p.addr, err)
			}
			p.ln = p.rls.Listener(ln, p.maxConns)
			return nil
		},
		Run: func(context.Context) error {
			if err := p.server.Serve(p.ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
				return fmt.Errorf("GRPC_LISTEN_ADDR %s: %w", p.address(), err)
			}
			return nil
		},
		Stop: func(ctx context.Context) error { return p.rls.GracefulStop(ctx, p.server) },
	}
}

// address is the bound address (the port chosen for ":0").
func (p *grpcPart) address() string { return p.ln.Addr().String() }

// liveInstances tells the decision service what is known of the fleet's
// size before its heartbeats have counted it: LOCAL_EXPECTED_INSTANCES and
// the count a previous run kept in LOCAL_STATE_DIR; the count it keeps from
// now on goes there and into Redis with the heartbeats.
func (a *App) liveInstances() {
	dir := a.cfg.LocalStateDir
	if dir != "" {
		n, err := instancefile.Read(dir)
		if err != nil {
			a.log.Warn("live instance count on disk unreadable, ignored", zap.String("dir", dir), zap.Error(err))
		}
		a.svc.KnownInstances(limiter.SourceDisk, n)
	}
	a.svc.SetInstances(int64(a.cfg.LocalExpectedInstances), func(n int64) {
		a.heartbeats.KeepCount(n)
		if dir == "" {
			return
		}
		if err := instancefile.Write(dir, n); err != nil {
			a.log.Warn("live instance count not kept on disk", zap.String("dir", dir), zap.Error(err))
		}
	})
}

// readLastCount reads the fleet's last live count from Redis (a warm-up
// step): until this run's heartbeats have counted the fleet, local limits
// are divided by at least it.
func (a *App) readLastCount(ctx context.Context) error {
	n, err := a.heartbeats.LastCount(ctx)
	if err != nil {
		return err
	}
	a.svc.KnownInstances(limiter.SourceRedis, n)
	if n > 0 {
		a.heartbeats.KeepCount(n) // until a count of this run replaces it
	}
	return nil
}
