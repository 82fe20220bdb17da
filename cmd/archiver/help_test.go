package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/ratewarden/ratewarden/internal/config"
	"github.com/ratewarden/ratewarden/internal/testkit/proctest"
)

func TestMain(m *testing.M) { proctest.RunMainOr(m, main) }

// -h, -help and help print the usage and every variable the archiver reads,
// with its default, on stdout.
func TestHelp(t *testing.T) {
	var names []string
	for _, v := range config.Vars(config.ArchiverProcess) {
		names = append(names, v.Name)
	}
	proctest.CheckHelp(t, "archiver", names)
}

// The archiver uses no Redis, so it does not link a Redis client.
func TestNoRedisClient(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list the dependencies")
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "github.com/redis/") || strings.HasSuffix(dep, "/internal/redisstore") {
			t.Errorf("cmd/archiver depends on %s", dep)
		}
	}
}
