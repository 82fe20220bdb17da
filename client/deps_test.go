package client_test

import (
	"strings"
	"testing"

	"github.com/ratewarden/ratewarden/internal/testkit/proctest"
)

// The client is imported by applications: it must not bring them the
// services' drivers, logger or metrics library.
func TestClientDependencies(t *testing.T) {
	for _, dep := range proctest.Deps(t) {
		for _, banned := range []string{"go.uber.org/zap", "github.com/redis/", "github.com/segmentio/kafka-go", "github.com/twmb/", "github.com/jackc/", "github.com/prometheus/"} {
			if strings.HasPrefix(dep, banned) {
				t.Errorf("package client depends on %s", dep)
			}
		}
	}
}
