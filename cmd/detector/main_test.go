package main

import (
	"context"
	"io"
	"strings"
	"testing"
)

// The detector's happy path runs as a real process in internal/e2e; here,
// a bad configuration stops it at start with the variable named.
func TestRunRefusesBadConfiguration(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"bad batch size", map[string]string{"DETECTOR_BATCH_SIZE": "0"}, "DETECTOR_BATCH_SIZE"},
		{"bad batch wait", map[string]string{"DETECTOR_BATCH_WAIT": "soon"}, "DETECTOR_BATCH_WAIT"},
		{"bad brokers", map[string]string{"KAFKA_BROKERS": "nohost"}, "KAFKA_BROKERS"},
		{"missing rules file", map[string]string{"RULES_FILE": "/nonexistent.yaml"}, "RULES_FILE"},
		{"bad redis url", map[string]string{"RULES_FILE": "../../deploy/rules.example.yaml", "REDIS_URL": "http://x"}, "REDIS_URL"},
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
