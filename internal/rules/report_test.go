package rules

import (
	"testing"
	"time"
)

// Durations drop their zero units, as they are written in rules files.
func TestReportDuration(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{500 * time.Millisecond, "500ms"},
		{10 * time.Second, "10s"},
		{5 * time.Minute, "5m"},
		{90 * time.Second, "1m30s"},
		{time.Hour, "1h"},
		{90 * time.Minute, "1h30m"},
		{time.Hour + time.Second, "1h1s"},
		{48 * time.Hour, "48h"},
	}
	for _, tt := range tests {
		if got := reportDuration(tt.d); got != tt.want {
			t.Errorf("reportDuration(%v) = %q, want %q", tt.d, got, tt.want)
		}
	}
}
