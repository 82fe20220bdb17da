// Command console serves the security team's web console: the archive's
// bans, violations and outcomes, the limiters' live bans and rules, and
// audited bans and lifts through the limiters' admin API.
package main

import (
	"context"
	"fmt"
	"io"
	"os"

	app "github.com/ratewarden/ratewarden/internal/app/console"
	"github.com/ratewarden/ratewarden/internal/buildinfo"
	"github.com/ratewarden/ratewarden/internal/config"
	"github.com/ratewarden/ratewarden/internal/lifecycle"
	"github.com/ratewarden/ratewarden/internal/telemetry"
)

// usage heads the console's -help; the variables follow it.
const usage = `Usage: console [help | version | user NAME ROLE]

Serves the security team's web console (see docs/console.md). The
environment variables below configure it; version (also -version)
prints the build, and help (also -h, -help) this text. user NAME ROLE
prints the line of the users file (CONSOLE_USERS_FILE) of a viewer or
an operator, its password read from the first line of the input.
`

func main() {
	if buildinfo.Handle(os.Args[1:], os.Stdout, "console") {
		return
	}
	if config.Help(os.Args[1:], os.Stdout, config.ConsoleProcess, usage) {
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "user" {
		if err := userLine(os.Args[2:], os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "console user:", err)
			os.Exit(2)
		}
		return
	}
	lifecycle.Main("console", run)
}

// run wires the console and serves until ctx is cancelled.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	if len(args) > 0 {
		return fmt.Errorf("unexpected arguments %q: configuration comes from the environment (see console -help)", args)
	}
	cfg, err := config.LoadConsole(getenv)
	if err != nil {
		return err
	}
	log, err := telemetry.NewLogger(stderr, "console", cfg.LogLevel, cfg.LogFormat)
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
