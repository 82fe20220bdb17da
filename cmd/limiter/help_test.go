package main

import (
	"strings"
	"testing"

	"github.com/ratewarden/ratewarden/internal/config"
	"github.com/ratewarden/ratewarden/internal/testkit/proctest"
)

func TestMain(m *testing.M) { proctest.RunMainOr(m, main) }

// -h, -help and help print the usage and every variable the limiter reads,
// with its default, on stdout.
func TestHelp(t *testing.T) {
	proctest.CheckHelp(t, "limiter", config.VarNames(config.LimiterProcess))
}

// The rules subcommand keeps its own help.
func TestRulesHelp(t *testing.T) {
	if out := proctest.RunMain(t, "limiter", "rules", "-h"); !strings.Contains(out, "rules check") || strings.Contains(out, "LISTEN_ADDR") {
		t.Fatalf("limiter rules -h:\n%s", out)
	}
}
