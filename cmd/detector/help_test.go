package main

import (
	"testing"

	"github.com/ratewarden/ratewarden/internal/config"
	"github.com/ratewarden/ratewarden/internal/testkit/proctest"
)

func TestMain(m *testing.M) { proctest.RunMainOr(m, main) }

// -h, -help and help print the usage and every variable the detector reads,
// with its default, on stdout.
func TestHelp(t *testing.T) {
	var names []string
	for _, v := range config.Vars(config.DetectorProcess) {
		names = append(names, v.Name)
	}
	proctest.CheckHelp(t, "detector", names)
}
