package rules

import (
	"reflect"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
)

const scheduleYAML = `
rules:
  - id: sched
    key: [ip]
    algorithm: fixed_window
    limits: [{requests: 100, per: 1m}]
    penalty: 1m
    tiers: {VIP: [{requests: 1000, per: 1m}]}
    schedule:
      - from: 2026-11-27T00:00:00Z          # absolute, with its own penalty and tiers
        to: 2026-11-28T00:00:00Z
        limits: [{requests: 10, per: 1m}]
        penalty: 10m
        tiers: {gold: [{requests: 20, per: 1m}]}
      - daily: {from: "22:00", to: "06:00"}  # UTC, crosses midnight
        limits: [{requests: 5, per: 1m}]
      - daily: {from: "09:00", to: "10:00", tz: Europe/Paris}
        limits: [{requests: 7, per: 1m}]
        penalty: 0s
`

func TestScheduleActivation(t *testing.T) {
	s := mustCompile(t, scheduleYAML)
	tests := []struct {
		name    string
		at      string
		tier    string
		want    int64
		penalty time.Duration
	}{
		{"outside every entry", "2026-06-15T12:00:00Z", "", 100, time.Minute},
		{"rule tier override", "2026-06-15T12:00:00Z", "vip", 1000, time.Minute},
		{"absolute from is inclusive", "2026-11-27T00:00:00Z", "", 10, 10 * time.Minute},
		{"absolute inside", "2026-11-27T12:00:00Z", "", 10, 10 * time.Minute},
		{"absolute entry tier override", "2026-11-27T12:00:00Z", "GOLD", 20, 10 * time.Minute},
		{"absolute entry replaces rule tier overrides", "2026-11-27T12:00:00Z", "VIP", 10, 10 * time.Minute},
		{"absolute wins over daily (first active)", "2026-11-27T23:00:00Z", "", 10, 10 * time.Minute},
		{"absolute to is exclusive: daily applies", "2026-11-28T00:00:00Z", "", 5, time.Minute},
		{"daily before midnight", "2026-06-15T22:00:00Z", "", 5, time.Minute},
		{"daily after midnight", "2026-06-16T05:59:59Z", "", 5, time.Minute},
		{"daily end exclusive", "2026-06-16T06:00:00Z", "", 100, time.Minute},
		{"daily just before start", "2026-06-15T21:59:59Z", "", 100, time.Minute},
		{"daily entry replaces rule tier overrides", "2026-06-15T23:30:00Z", "VIP", 5, time.Minute},
		// Europe/Paris 09:00-10:00 local: UTC+2 in summer, UTC+1 in winter.
		{"paris summer 09:30 local", "2026-07-01T07:30:00Z", "", 7, 0},
		{"paris summer 10:30 local", "2026-07-01T08:30:00Z", "", 100, time.Minute},
		{"paris winter 08:30 local", "2026-01-15T07:30:00Z", "", 100, time.Minute},
		{"paris winter 09:30 local", "2026-01-15T08:30:00Z", "", 7, 0},
		{"paris DST day (2026-03-29) 09:15 CEST", "2026-03-29T07:15:00Z", "", 7, 0},
		{"paris day before DST 09:15 CET", "2026-03-28T08:15:00Z", "", 7, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := request("203.0.113.9", "/")
			r.Tier = tt.tier
			as := s.Match(r, mustTime(t, tt.at), nil)
			c := as[0].Call
			if got := c.Limits[0].Requests; got != tt.want || c.Penalty != tt.penalty {
				t.Errorf("limit, penalty = %d, %v; want %d, %v", got, c.Penalty, tt.want, tt.penalty)
			}
		})
	}
}

func TestDailyWindowWallClock(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	// 02:00-03:00 does not exist on the spring-forward day: never active.
	w := compileWindow(ScheduleEntry{Daily: &Daily{From: "02:00", To: "03:00", TZ: "Europe/Paris"}, Limits: []Limit{reqs(1, time.Second)}})
	for m := 0; m < 24*60; m++ {
		now := time.Date(2026, 3, 29, 0, 0, 0, 0, time.UTC).Add(time.Duration(m) * time.Minute)
		if w.active(now) {
			t.Fatalf("active at %v (%v)", now, now.In(paris))
		}
	}
	// On the fall-back day 02:00-03:00 happens twice: active for two hours.
	active := 0
	for m := 0; m < 24*60; m++ {
		if w.active(time.Date(2026, 10, 24, 22, 0, 0, 0, time.UTC).Add(time.Duration(m) * time.Minute)) {
			active++
		}
	}
	if active != 120 {
		t.Errorf("active %d minutes on the fall-back day, want 120", active)
	}
}

func TestEscalateBounds(t *testing.T) {
	s := mustCompile(t, `
rules:
  - id: esc
    key: [ip]
    algorithm: fixed_window
    limits: [{requests: 1, per: 1s}]
    escalate:
      - {triggers: 3, within: 10m, penalty: 30m}
      - {triggers: 5, within: 1h, penalty: 24h, from: 2026-11-27T00:00:00Z, to: 2026-12-01T00:00:00Z}
      - {triggers: 2, within: 1m, penalty: 1h, from: 2026-11-30T00:00:00Z}
      - {triggers: 9, within: 1m, penalty: 2h, to: 2026-01-01T00:00:00Z}
`)
	always := decide.Escalation{Triggers: 3, Within: 10 * time.Minute, Penalty: 30 * time.Minute}
	friday := decide.Escalation{Triggers: 5, Within: time.Hour, Penalty: 24 * time.Hour}
	late := decide.Escalation{Triggers: 2, Within: time.Minute, Penalty: time.Hour}
	early := decide.Escalation{Triggers: 9, Within: time.Minute, Penalty: 2 * time.Hour}
	tests := []struct {
		at   string
		want []decide.Escalation
	}{
		{"2025-12-31T23:59:59Z", []decide.Escalation{always, early}},
		{"2026-01-01T00:00:00Z", []decide.Escalation{always}},
		{"2026-11-26T23:59:59Z", []decide.Escalation{always}},
		{"2026-11-27T00:00:00Z", []decide.Escalation{always, friday}},
		{"2026-11-30T00:00:00Z", []decide.Escalation{always, friday, late}},
		{"2026-12-01T00:00:00Z", []decide.Escalation{always, late}},
		{"2030-01-01T00:00:00Z", []decide.Escalation{always, late}},
	}
	for _, tt := range tests {
		t.Run(tt.at, func(t *testing.T) {
			as := s.Match(request("203.0.113.9", "/"), mustTime(t, tt.at), nil)
			if got := as[0].Call.Escalations; !reflect.DeepEqual(got, tt.want) {
				t.Errorf("escalations = %+v, want %+v", got, tt.want)
			}
		})
	}
	t.Run("none", func(t *testing.T) {
		s := mustCompile(t, "rules: [{id: a, key: [ip], algorithm: fixed_window, limits: [{requests: 1, per: 1s}]}]\n")
		if got := s.Match(request("203.0.113.9", "/"), time.Now(), nil)[0].Call.Escalations; got != nil {
			t.Errorf("escalations = %+v", got)
		}
	})
}
