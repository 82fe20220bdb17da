package abuse

import (
	"math"
	"regexp"
	"testing"
	"time"
)

func TestBanID(t *testing.T) {
	const trigger = "0b7e6f0c-5d1e-4a51-9e1c-2f5f6a3b9c01"
	id := BanID("ip", "203.0.113.7", "scan", trigger)
	if !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(id) {
		t.Fatalf("BanID = %q, not a version 8 UUID", id)
	}
	// Pinned: the id is part of the contract with consumers that
	// deduplicate, so it must not change between releases.
	if want := "644eee3a-aa6b-8fbc-bb75-2555b94f69b9"; id != want {
		t.Errorf("BanID = %s, want %s", id, want)
	}
	differ := []struct{ name, scope, subject, reason, trigger string }{
		{"scope", "user", "203.0.113.7", "scan", trigger},
		{"subject", "ip", "203.0.113.8", "scan", trigger},
		{"reason", "ip", "203.0.113.7", "violations_1h", trigger},
		{"trigger", "ip", "203.0.113.7", "scan", "0b7e6f0c-5d1e-4a51-9e1c-2f5f6a3b9c02"},
		{"field boundaries", "ip", "203.0.113.7s", "can", trigger},
	}
	seen := map[string]string{id: "base"}
	for _, tt := range differ {
		t.Run(tt.name, func(t *testing.T) {
			got := BanID(tt.scope, tt.subject, tt.reason, tt.trigger)
			if prev, dup := seen[got]; dup {
				t.Errorf("same id as %s: %s", prev, got)
			}
			seen[got] = tt.name
		})
	}
}

func TestViolationReason(t *testing.T) {
	tests := []struct {
		within time.Duration
		want   string
	}{
		{time.Hour, "violations_1h"},
		{24 * time.Hour, "violations_24h"},
		{5 * time.Minute, "violations_5m"},
		{30 * time.Minute, "violations_30m"},
		{90 * time.Minute, "violations_90m"},
		{90 * time.Second, "violations_90s"},
		{10 * time.Second, "violations_10s"},
		{500 * time.Millisecond, "violations_500ms"},
		{1500 * time.Microsecond, "violations_1500us"},
		{7, "violations_7ns"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := ViolationReason(tt.within); got != tt.want {
				t.Errorf("ViolationReason(%v) = %q, want %q", tt.within, got, tt.want)
			}
		})
	}
}

func TestEscalationDurationMs(t *testing.T) {
	def := Escalation{Factor: 2, Cap: 24 * time.Hour, Period: 24 * time.Hour}
	const h = int64(time.Hour / time.Millisecond)
	tests := []struct {
		name      string
		e         Escalation
		baseMs, n int64
		want      int64
	}{
		{"first ban", def, h, 0, h},
		{"second", def, h, 1, 2 * h},
		{"third", def, h, 2, 4 * h},
		{"capped", def, h, 5, 24 * h},
		{"cap bounds a first ban", def, 48 * h, 0, 24 * h},
		{"factor 1", Escalation{Factor: 1, Cap: 24 * time.Hour}, h, 10, h},
		{"factor 0 counts as 1", Escalation{Cap: 24 * time.Hour}, h, 10, h},
		{"factor 3", Escalation{Factor: 3, Cap: 24 * time.Hour}, 1000, 3, 27000},
		{"no cap saturates", Escalation{Factor: 1 << 40}, h, 5, math.MaxInt64},
		{"huge n", def, 1, math.MaxInt64, 24 * h},
		{"zero base", def, 0, 3, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.e.DurationMs(tt.baseMs, tt.n); got != tt.want {
				t.Errorf("DurationMs(%d, %d) = %d, want %d", tt.baseMs, tt.n, got, tt.want)
			}
		})
	}
}
