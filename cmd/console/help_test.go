package main

import (
	"testing"

	"github.com/ratewarden/ratewarden/internal/config"
	"github.com/ratewarden/ratewarden/internal/testkit/proctest"
)

func TestMain(m *testing.M) { proctest.RunMainOr(m, main) }

// -h, -help and help print the usage and every variable the console reads,
// with its default, on stdout.
func TestHelp(t *testing.T) {
	proctest.CheckHelp(t, "console", config.VarNames(config.ConsoleProcess))
}
