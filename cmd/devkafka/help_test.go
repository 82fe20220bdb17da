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
	var names []string
	for _, v := range rwconfig.Vars(rwconfig.DevKafkaProcess) {
		names = append(names, v.Name)
	}
	proctest.CheckHelp(t, "devkafka", names)
}
