package client_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The client is imported by applications: the root package must not bring
// them the services' drivers, logger or metrics library, nor gRPC and
// protobuf (package rlgrpc has the interceptors), nor compression
// libraries, nor any package of the limiter's module.
func TestClientDependencies(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list the dependencies")
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 || deps[len(deps)-1] != "github.com/ratewarden/ratewarden/client" {
		t.Fatalf("go list -deps listed %d packages, ending %q: not the client's", len(deps), deps[len(deps)-1:])
	}
	banned := []string{"google.golang.org/grpc", "google.golang.org/protobuf", "google.golang.org/genproto",
		"github.com/valyala/", "github.com/klauspost/", "github.com/andybalbalholm/", "github.com/molecule-man/",
		"go.uber.org/zap", "github.com/redis/", "github.com/segmentio/kafka-go", "github.com/twmb/", "github.com/jackc/",
		"github.com/prometheus/", "github.com/envoyproxy/"}
	for _, dep := range deps {
		for _, b := range banned {
			if strings.HasPrefix(dep, b) {
				t.Errorf("package client depends on %s", dep)
			}
		}
		if strings.Contains(dep, "brotli") {
			t.Errorf("package client depends on %s, a brotli", dep)
		}
		if strings.HasPrefix(dep, "github.com/ratewarden/ratewarden/") && !strings.HasPrefix(dep, "github.com/ratewarden/ratewarden/client/") &&
			dep != "github.com/ratewarden/ratewarden/client" {
			t.Errorf("package client depends on %s, of the limiter's module", dep)
		}
	}
}
