package main

import (
	"testing"

	"github.com/ratewarden/ratewarden/internal/config"
	"github.com/ratewarden/ratewarden/internal/ops"
	"github.com/ratewarden/ratewarden/internal/redisstore"
	"github.com/ratewarden/ratewarden/internal/rlsapi"
)

// The configuration's defaults are those the adapters' benchmarks and
// zero values stand for; internal/config cannot import the adapters to
// share them.
func TestDefaultsAreTheAdapters(t *testing.T) {
	cfg, err := config.LoadLimiter(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if cfg.PipelineWait != redisstore.DefaultWait {
		t.Errorf("REDIS_PIPELINE_WAIT defaults to %v, redisstore.DefaultWait is %v", cfg.PipelineWait, redisstore.DefaultWait)
	}
	if cfg.MaxConnections != ops.DefaultMaxConns {
		t.Errorf("HTTP_MAX_CONNECTIONS defaults to %d, ops.DefaultMaxConns is %d", cfg.MaxConnections, ops.DefaultMaxConns)
	}
	if cfg.RLS.MaxConnections != rlsapi.DefaultMaxConnections {
		t.Errorf("GRPC_MAX_CONNECTIONS defaults to %d, rlsapi.DefaultMaxConnections is %d", cfg.RLS.MaxConnections, rlsapi.DefaultMaxConnections)
	}
}
