package main

import (
	"context"
	"io"
	"strings"
	"testing"
)

// The archiver's happy path runs as a real process in internal/e2e; here,
// a bad configuration stops it at start with the variable named.
func TestRunRefusesBadConfiguration(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"bad batch size", map[string]string{"ARCHIVER_BATCH_SIZE": "0"}, "ARCHIVER_BATCH_SIZE"},
		{"bad flush interval", map[string]string{"ARCHIVER_FLUSH_INTERVAL": "soon"}, "ARCHIVER_FLUSH_INTERVAL"},
		{"bad retention", map[string]string{"RETENTION_DAYS": "0"}, "RETENTION_DAYS"},
		{"bad brokers", map[string]string{"KAFKA_BROKERS": "nohost"}, "KAFKA_BROKERS"},
		{"unreachable database", map[string]string{"DATABASE_URL": "postgres://postgres@127.0.0.1:1/x?sslmode=disable&connect_timeout=2"}, "DATABASE_URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := run(context.Background(), nil, func(k string) string { return tt.env[k] }, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error naming %s", err, tt.want)
			}
		})
	}
	if err := run(context.Background(), []string{"extra"}, func(string) string { return "" }, io.Discard); err == nil {
		t.Fatal("unexpected arguments accepted")
	}
}
