package telemetry

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"go.uber.org/zap"
)

// Every line names its service: a service field in JSON, the logger's name
// column in console, for the service's logger and for the named loggers of
// its parts alike.
func TestLoggerNamesService(t *testing.T) {
	t.Run("json", func(t *testing.T) {
		var out bytes.Buffer
		log, err := NewLogger(&out, "detector", "info", "json")
		if err != nil {
			t.Fatal(err)
		}
		log.Info("shutting down")
		log.Named("consumer").Warn("rebalance", zap.String("topic", "t"))
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		if len(lines) != 2 {
			t.Fatalf("%d lines, want 2:\n%s", len(lines), out.String())
		}
		for _, line := range lines {
			var fields map[string]any
			if err := json.Unmarshal([]byte(line), &fields); err != nil || fields["service"] != "detector" {
				t.Errorf("line %s: want service detector (%v)", line, err)
			}
		}
	})
	t.Run("console", func(t *testing.T) {
		var out bytes.Buffer
		log, err := NewLogger(&out, "archiver", "info", "console")
		if err != nil {
			t.Fatal(err)
		}
		log.Info("stopped")
		log.Named("pg").Info("flushed")
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		want := [][2]string{{"archiver", "stopped"}, {"archiver.pg", "flushed"}}
		if len(lines) != len(want) {
			t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), out.String())
		}
		for i, line := range lines {
			cols := strings.Split(line, "\t") // time, level, name, message
			if len(cols) < 4 || cols[2] != want[i][0] || cols[3] != want[i][1] {
				t.Errorf("line %q: want the name %s before the message %s", line, want[i][0], want[i][1])
			}
		}
	})
}
