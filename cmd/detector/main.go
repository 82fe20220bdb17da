// Command detector consumes the decisions, the outcome reports and, when
// ACCESS_LOG_TOPIC is set, a gateway's access log, finds abusive clients
// and bans them: Redis blacklist entries the limiters enforce, and messages
// on the ban topic for the security team. It reads the environment and
// handles signals; the service is assembled by internal/app/detector.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	app "github.com/ratewarden/ratewarden/internal/app/detector"
	"github.com/ratewarden/ratewarden/internal/buildinfo"
	"github.com/ratewarden/ratewarden/internal/config"
	"github.com/ratewarden/ratewarden/internal/lifecycle"
	"github.com/ratewarden/ratewarden/internal/redisstore"
	"github.com/ratewarden/ratewarden/internal/telemetry"
)

// usage heads the detector's -help; the variables follow it.
const usage = `Usage: detector [help | version]

Consumes the decisions and the outcomes (and a gateway's access log) and
bans abusive clients. The environment variables below configure it;
version (also -version) prints the build, and help (also -h, -help) this
text.
`

func main() {
	if buildinfo.Handle(os.Args[1:], os.Stdout, "detector") {
		return
	}
	if config.Help(os.Args[1:], os.Stdout, config.DetectorProcess, usage) {
		return
	}
	lifecycle.Main("detector", run)
}

// run wires the detector and consumes until ctx is cancelled; the batch in
// hand is finished (or left uncommitted) before it returns.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	if len(args) > 0 {
		return fmt.Errorf("unexpected arguments %q: configuration comes from the environment (see detector -help)", args)
	}
	cfg, err := config.LoadDetector(getenv)
	if err != nil {
		return err
	}
	log, err := telemetry.NewLogger(stderr, "detector", cfg.LogLevel, cfg.LogFormat)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	// go-redis logs through one logger per process.
	redisstore.RouteLogs(log.Named("redis"))
	// SIGHUP reads the rules file again at once, as it does the limiter's.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	a, err := app.New(cfg, app.Deps{Log: log, Registry: telemetry.NewRegistry(), Reload: hup})
	if err != nil {
		return err
	}
	return a.Run(ctx)
}
