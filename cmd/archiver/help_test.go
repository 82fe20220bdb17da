package main

import (
	"strings"
	"testing"

	"github.com/ratewarden/ratewarden/internal/config"
	"github.com/ratewarden/ratewarden/internal/testkit/proctest"
)

func TestMain(m *testing.M) { proctest.RunMainOr(m, main) }

// -h, -help and help print the usage and every variable the archiver reads,
// with its default, on stdout.
func TestHelp(t *testing.T) {
	proctest.CheckHelp(t, "archiver", config.VarNames(config.ArchiverProcess))
}

// The archiver uses no Redis, so it does not link a Redis client.
func TestNoRedisClient(t *testing.T) {
	for _, dep := range proctest.Deps(t) {
		if strings.HasPrefix(dep, "github.com/redis/") || strings.HasSuffix(dep, "/internal/redisstore") {
			t.Errorf("cmd/archiver depends on %s", dep)
		}
	}
}
