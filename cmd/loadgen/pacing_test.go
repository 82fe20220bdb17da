package main

import (
	"context"
	"testing"
	"time"
)

func TestScheduleOpenLoop(t *testing.T) {
	start := time.Unix(1000, 0)
	tests := []struct {
		name             string
		warmup, duration time.Duration
		limit            uint64
		rate             float64
		wantSlots        int // requests handed out
		wantMeasured     int
		wantLastDue      time.Duration // after start
	}{
		{"1s at 10/s", 0, time.Second, 0, 10, 10, 10, 900 * time.Millisecond},
		{"warm-up first", 500 * time.Millisecond, time.Second, 0, 10, 15, 10, 1400 * time.Millisecond},
		{"limit", 0, time.Second, 4, 10, 4, 4, 300 * time.Millisecond},
		{"limit after warm-up", 200 * time.Millisecond, 0, 3, 10, 5, 3, 400 * time.Millisecond},
		{"fractional rate", 0, 10 * time.Second, 0, 0.5, 5, 5, 8 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSchedule(start, tt.warmup, tt.duration, tt.limit, tt.rate)
			slots, measured := 0, 0
			var last time.Time
			for {
				due, m, ok := s.nextOpen()
				if !ok {
					break
				}
				if m != !due.Before(s.measure) {
					t.Fatalf("request due %s measured=%v, measurement starts %s", due.Sub(start), m, s.measure.Sub(start))
				}
				slots++
				if m {
					measured++
				}
				last = due
				if slots > 1000 {
					t.Fatal("no end")
				}
			}
			if slots != tt.wantSlots || measured != tt.wantMeasured || last.Sub(start) != tt.wantLastDue {
				t.Fatalf("%d requests, %d measured, last due at %s; want %d, %d, %s",
					slots, measured, last.Sub(start), tt.wantSlots, tt.wantMeasured, tt.wantLastDue)
			}
		})
	}
}

func TestScheduleClosedLoop(t *testing.T) {
	start := time.Unix(1000, 0)
	s := newSchedule(start, time.Second, 2*time.Second, 2, 0)
	tests := []struct {
		name         string
		at           time.Duration
		measured, ok bool
	}{
		{"warm-up", 500 * time.Millisecond, false, true},
		{"first measured", time.Second, true, true},
		{"second measured", 1500 * time.Millisecond, true, true},
		{"limit reached", 1600 * time.Millisecond, false, false},
		{"after the end", 3 * time.Second, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if m, ok := s.claimClosed(start.Add(tt.at)); m != tt.measured || ok != tt.ok {
				t.Fatalf("claimClosed at %s = %v, %v; want %v, %v", tt.at, m, ok, tt.measured, tt.ok)
			}
		})
	}
}

func TestRunOpenLoopPacing(t *testing.T) {
	fake := &fakeLimiter{}
	url := startFake(t, fake)
	_, s, err := runLoadgen(t, context.Background(), "-url", url, "-rate", "500", "-duration", "1s", "-workers", "4", "-progress", "0")
	if err != nil {
		t.Fatal(err)
	}
	if got := fake.requests.Load(); got < 450 || got > 550 {
		t.Fatalf("server saw %d requests at -rate 500 for 1s, want 500 ± 10%%", got)
	}
	if rps := num(t, s, "rps"); rps < 450 || rps > 550 || s["mode"] != "open" || num(t, s, "target_rate") != 500 {
		t.Fatalf("summary: mode %s, target %s, rps %v; want open, 500, about 500", s["mode"], s["target_rate"], rps)
	}
	if late := num(t, s, "late"); late > 50 {
		t.Errorf("%v late sends against an idle server", late)
	}
}

// TestRunOpenLoopCountsQueueing holds the open loop to measuring from the
// due time: one connection to a server taking 20 ms cannot keep 100 req/s,
// so requests fall behind, count as late, and their latency grows with the
// backlog instead of staying at 20 ms.
func TestRunOpenLoopCountsQueueing(t *testing.T) {
	url := startFake(t, &fakeLimiter{delay: 20 * time.Millisecond})
	_, s, err := runLoadgen(t, context.Background(), "-url", url, "-rate", "100", "-duration", "600ms", "-workers", "1", "-progress", "0")
	if err != nil {
		t.Fatal(err)
	}
	requests := num(t, s, "requests")
	if requests < 15 || requests > 31 {
		t.Fatalf("%v requests in 600ms at 20ms each, want about 30", requests)
	}
	if rps := num(t, s, "rps"); rps > 55 {
		t.Errorf("achieved %v req/s, want at most about 50", rps)
	}
	if late := num(t, s, "late"); late < requests-3 {
		t.Errorf("%v of %v requests late, want nearly all", late, requests)
	}
	if p90 := num(t, s, "p90_ms"); p90 < 150 {
		t.Errorf("p90 = %vms: the backlog is not in the latency", p90)
	}
}
