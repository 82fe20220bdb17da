// Command notifier sends the bans, unbans and warnings of the bans topic
// to webhooks as digests: at least once, with an idempotency key, offsets
// committed only after every receiver accepted its digests.
package main

import (
	"context"
	"fmt"
	"io"
	"os"

	app "github.com/ratewarden/ratewarden/internal/app/notifier"
	"github.com/ratewarden/ratewarden/internal/buildinfo"
	"github.com/ratewarden/ratewarden/internal/config"
	"github.com/ratewarden/ratewarden/internal/lifecycle"
	"github.com/ratewarden/ratewarden/internal/telemetry"
)

// usage heads the notifier's -help; the variables follow it.
const usage = `Usage: notifier [help | version]

Sends bans and warnings to webhooks (generic JSON, Slack-compatible) as
digests. The receivers are listed in NOTIFY_RECEIVERS_FILE; the
environment variables below configure the rest. version (also -version)
prints the build, and help (also -h, -help) this text.
`

func main() {
	if buildinfo.Handle(os.Args[1:], os.Stdout, "notifier") {
		return
	}
	if config.Help(os.Args[1:], os.Stdout, config.NotifierProcess, usage) {
		return
	}
	lifecycle.Main("notifier", run)
}

// run reads the receivers file, then consumes the bans topic until ctx is
// cancelled.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	if len(args) > 0 {
		return fmt.Errorf("unexpected arguments %q: configuration comes from the environment (see notifier -help)", args)
	}
	cfg, err := config.LoadNotifier(getenv)
	if err != nil {
		return err
	}
	log, err := telemetry.NewLogger(stderr, "notifier", cfg.LogLevel, cfg.LogFormat)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	a, err := app.New(cfg, app.Deps{Log: log, Registry: telemetry.NewRegistry()})
	if err != nil {
		return err
	}
	return a.Run(ctx)
}
