package config

import (
	"strings"
	"testing"

	"github.com/ratewarden/ratewarden/internal/testkit/proctest"
)

// adapters are the drivers and the packages that wrap them: configuration
// is read by every process, so importing one would link it into all.
var adapters = []string{
	"github.com/redis/go-redis", "github.com/jackc/pgx", "github.com/segmentio/kafka-go", "github.com/twmb/franz-go",
	"google.golang.org/grpc", "github.com/valyala/fasthttp",
	"github.com/ratewarden/ratewarden/internal/redisstore", "github.com/ratewarden/ratewarden/internal/kafkabus",
	"github.com/ratewarden/ratewarden/internal/pgstore",
}

func TestImportsNoAdapter(t *testing.T) {
	for _, dep := range proctest.Deps(t) {
		for _, a := range adapters {
			if dep == a || strings.HasPrefix(dep, a+"/") {
				t.Errorf("internal/config depends on %s", dep)
			}
		}
	}
}
