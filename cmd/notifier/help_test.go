package main

import (
	"testing"

	"github.com/ratewarden/ratewarden/internal/config"
	"github.com/ratewarden/ratewarden/internal/testkit/proctest"
)

func TestMain(m *testing.M) { proctest.RunMainOr(m, main) }

// -h, -help and help print the usage and every variable the notifier
// reads, with its default, on stdout.
func TestHelp(t *testing.T) {
	proctest.CheckHelp(t, "notifier", config.VarNames(config.NotifierProcess))
}

// version, -version and --version print the build this binary comes from.
func TestVersion(t *testing.T) { proctest.CheckVersion(t, "notifier") }
