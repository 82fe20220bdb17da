package main

import (
	"testing"

	rwconfig "github.com/ratewarden/ratewarden/internal/config"
	"github.com/ratewarden/ratewarden/internal/testkit/proctest"
)

func TestMain(m *testing.M) { proctest.RunMainOr(m, main) }

// -h, -help and help print the usage and every variable the devkafka reads,
// with its default, on stdout.
func TestHelp(t *testing.T) {
	proctest.CheckHelp(t, "devkafka", rwconfig.VarNames(rwconfig.DevKafkaProcess))
}
