package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The notifier's happy path runs in internal/app/notifier's tests; here, a
// bad configuration stops it at start with the variable named.
func TestRunRefusesBadConfiguration(t *testing.T) {
	dir := t.TempDir()
	typo := filepath.Join(dir, "typo.yaml")
	if err := os.WriteFile(typo, []byte("receivers:\n  - name: sec\n    url: http://127.0.0.1:1/\n    fromat: slack\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"no receivers file", nil, "NOTIFY_RECEIVERS_FILE: required"},
		{"missing receivers file", map[string]string{"NOTIFY_RECEIVERS_FILE": filepath.Join(dir, "none.yaml")}, "NOTIFY_RECEIVERS_FILE"},
		{"misspelt key", map[string]string{"NOTIFY_RECEIVERS_FILE": typo}, `did you mean "format"?`},
		{"bad delay", map[string]string{"NOTIFY_DIGEST_DELAY": "soon"}, "NOTIFY_DIGEST_DELAY"},
		{"bad pending bound", map[string]string{"NOTIFY_MAX_PENDING": "0"}, "NOTIFY_MAX_PENDING"},
		{"bad digest bound", map[string]string{"NOTIFY_MAX_DIGESTS_PER_WINDOW": "0"}, "NOTIFY_MAX_DIGESTS_PER_WINDOW"},
		{"bad brokers", map[string]string{"KAFKA_BROKERS": "nohost"}, "KAFKA_BROKERS"},
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
