// Command archiver stores violations, ban history and outcome reports in
// Postgres for analysts: batched, idempotent, offsets committed only after
// the database.
package main

import (
	"context"
	"fmt"
	"io"
	"os"

	app "github.com/ratewarden/ratewarden/internal/app/archiver"
	"github.com/ratewarden/ratewarden/internal/buildinfo"
	"github.com/ratewarden/ratewarden/internal/config"
	"github.com/ratewarden/ratewarden/internal/lifecycle"
	"github.com/ratewarden/ratewarden/internal/telemetry"
)

// usage heads the archiver's -help; the variables follow it.
const usage = `Usage: archiver [help | version]

Stores violations, ban history and outcome reports in Postgres. The
environment variables below configure it; version (also -version)
prints the build, and help (also -h, -help) this text.
`

func main() {
	if buildinfo.Handle(os.Args[1:], os.Stdout, "archiver") {
		return
	}
	if config.Help(os.Args[1:], os.Stdout, config.ArchiverProcess, usage) {
		return
	}
	lifecycle.Main("archiver", run)
}

// run prepares the database, then consumes the decisions, bans and
// outcomes topics until ctx is cancelled; a batch under way is committed
// before it returns.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	if len(args) > 0 {
		return fmt.Errorf("unexpected arguments %q: configuration comes from the environment (see archiver -help)", args)
	}
	cfg, err := config.LoadArchiver(getenv)
	if err != nil {
		return err
	}
	log, err := telemetry.NewLogger(stderr, "archiver", cfg.LogLevel, cfg.LogFormat)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	a, err := app.New(ctx, cfg, app.Deps{Log: log, Registry: telemetry.NewRegistry()})
	if err != nil {
		return err
	}
	return a.Run(ctx)
}
