// Command limiter is the decision service gateways call on every request.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/google/uuid"

	app "github.com/ratewarden/ratewarden/internal/app/limiter"
	"github.com/ratewarden/ratewarden/internal/buildinfo"
	"github.com/ratewarden/ratewarden/internal/config"
	"github.com/ratewarden/ratewarden/internal/gcfloor"
	"github.com/ratewarden/ratewarden/internal/lifecycle"
	"github.com/ratewarden/ratewarden/internal/redisstore"
	"github.com/ratewarden/ratewarden/internal/telemetry"
)

// usage heads the limiter's -help; the variables follow it.
const usage = `Usage: limiter [help | version | rules check [FILE...]]

The decision service. The environment variables below configure it;
"limiter rules check" checks rules files (see limiter rules -h), version
(also -version) prints the build, and help (also -h, -help) prints this
text.
`

func main() {
	if buildinfo.Handle(os.Args[1:], os.Stdout, "limiter") {
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "rules" {
		os.Exit(rulesCommand(os.Args[2:], os.Stdout, os.Stderr))
	}
	if config.Help(os.Args[1:], os.Stdout, config.LimiterProcess, usage) {
		return
	}
	gcfloor.Start(os.Getenv)
	lifecycle.Main("limiter", run)
}

// run reads the configuration, makes the logger and runs the limiter's
// assembly (internal/app/limiter) until ctx ends; SIGHUP reloads the rules
// file and the RLS directory.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	if len(args) > 0 {
		return fmt.Errorf("unexpected arguments %q: configuration comes from the environment (see limiter -help); "+
			"the only subcommand is \"rules check FILE...\"", args)
	}
	cfg, err := config.LoadLimiter(getenv)
	if err != nil {
		return err
	}
	log, err := telemetry.NewLogger(stderr, "limiter", cfg.LogLevel, cfg.LogFormat)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	uuid.EnableRandPool()
	// go-redis logs through one logger per process.
	redisstore.RouteLogs(log.Named("redis"))
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	a, err := app.New(cfg, app.Deps{Log: log, Registry: telemetry.NewRegistry(), Reload: hup})
	if err != nil {
		return err
	}
	return a.Run(ctx)
}
