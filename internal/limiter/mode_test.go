package limiter

import (
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
)

// step is one input to the machine at an offset from the start.
type step struct {
	at    time.Duration
	input string // "ok", "fail", "breaker", "tick"
}

func TestModeMachine(t *testing.T) {
	cfg := ModeConfig{FailedChecks: 3, PermissiveAfter: 5 * time.Minute, RecoverAfter: 60 * time.Second}
	fails := func(from time.Duration, n int) []step {
		var s []step
		for i := range n {
			s = append(s, step{from + time.Duration(i)*5*time.Second, "fail"})
		}
		return s
	}
	join := func(parts ...[]step) []step {
		var out []step
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	tests := []struct {
		name  string
		cfg   ModeConfig
		steps []step
		want  Mode
		trans []transition // transitions in order (reasons included)
	}{
		{"healthy checks stay in redis", cfg, []step{{0, "ok"}, {5 * time.Second, "ok"}}, ModeRedis, nil},
		{"two failures stay in redis", cfg, fails(0, 2), ModeRedis, nil},
		{"a healthy check resets the failure count", cfg,
			join(fails(0, 2), []step{{10 * time.Second, "ok"}}, fails(15*time.Second, 2)), ModeRedis, nil},
		{"three failures: local", cfg, fails(0, 3), ModeLocal,
			[]transition{{ModeRedis, ModeLocal, "3 failed health checks"}}},
		{"breaker opens: local at once", cfg, []step{{0, "breaker"}}, ModeLocal,
			[]transition{{ModeRedis, ModeLocal, "breaker opened"}}},
		{"breaker again in local: no transition", cfg, []step{{0, "breaker"}, {time.Second, "breaker"}}, ModeLocal,
			[]transition{{ModeRedis, ModeLocal, "breaker opened"}}},
		{"local before permissive_after stays local", cfg, []step{{0, "breaker"}, {4 * time.Minute, "tick"}, {299 * time.Second, "fail"}}, ModeLocal,
			[]transition{{ModeRedis, ModeLocal, "breaker opened"}}},
		{"local for permissive_after: permissive", cfg, []step{{0, "breaker"}, {5 * time.Minute, "tick"}}, ModePermissive,
			[]transition{{ModeRedis, ModeLocal, "breaker opened"}, {ModeLocal, ModePermissive, "local for 5m0s"}}},
		{"a failed check also advances to permissive", cfg, join([]step{{0, "breaker"}}, fails(5*time.Minute, 1)), ModePermissive,
			[]transition{{ModeRedis, ModeLocal, "breaker opened"}, {ModeLocal, ModePermissive, "local for 5m0s"}}},
		{"permissive_after 0: never permissive", ModeConfig{FailedChecks: 3, RecoverAfter: time.Minute},
			[]step{{0, "breaker"}, {time.Hour, "tick"}, {2 * time.Hour, "fail"}}, ModeLocal,
			[]transition{{ModeRedis, ModeLocal, "breaker opened"}}},
		{"healthy for recover_after: back to redis", cfg,
			[]step{{0, "breaker"}, {5 * time.Second, "ok"}, {35 * time.Second, "ok"}, {65 * time.Second, "ok"}}, ModeRedis,
			[]transition{{ModeRedis, ModeLocal, "breaker opened"}, {ModeLocal, ModeRedis, "healthy for 1m0s"}}},
		{"healthy short of recover_after stays local", cfg,
			[]step{{0, "breaker"}, {5 * time.Second, "ok"}, {64 * time.Second, "ok"}}, ModeLocal,
			[]transition{{ModeRedis, ModeLocal, "breaker opened"}}},
		{"a single failed check does not restart the healthy run", cfg,
			[]step{{0, "breaker"}, {5 * time.Second, "ok"}, {50 * time.Second, "fail"}, {55 * time.Second, "ok"}, {70 * time.Second, "ok"}}, ModeRedis,
			[]transition{{ModeRedis, ModeLocal, "breaker opened"}, {ModeLocal, ModeRedis, "healthy for 1m5s"}}},
		{"one failed check in five never holds back the recovery", cfg,
			[]step{{0, "breaker"}, {5 * time.Second, "ok"}, {10 * time.Second, "fail"}, {15 * time.Second, "ok"}, {20 * time.Second, "ok"},
				{25 * time.Second, "ok"}, {30 * time.Second, "ok"}, {35 * time.Second, "fail"}, {40 * time.Second, "ok"}, {65 * time.Second, "ok"}}, ModeRedis,
			[]transition{{ModeRedis, ModeLocal, "breaker opened"}, {ModeLocal, ModeRedis, "healthy for 1m0s"}}},
		{"two failed checks in a row restart the healthy run", cfg,
			[]step{{0, "breaker"}, {5 * time.Second, "ok"}, {50 * time.Second, "fail"}, {52 * time.Second, "fail"}, {55 * time.Second, "ok"}, {70 * time.Second, "ok"}}, ModeLocal,
			[]transition{{ModeRedis, ModeLocal, "breaker opened"}}},
		{"a breaker trip in local restarts the healthy run", cfg,
			[]step{{0, "breaker"}, {5 * time.Second, "ok"}, {50 * time.Second, "breaker"}, {55 * time.Second, "ok"}, {70 * time.Second, "ok"}}, ModeLocal,
			[]transition{{ModeRedis, ModeLocal, "breaker opened"}}},
		{"permissive recovers to redis", cfg,
			[]step{{0, "breaker"}, {5 * time.Minute, "tick"}, {6 * time.Minute, "ok"}, {7 * time.Minute, "ok"}}, ModeRedis,
			[]transition{{ModeRedis, ModeLocal, "breaker opened"}, {ModeLocal, ModePermissive, "local for 5m0s"}, {ModePermissive, ModeRedis, "healthy for 1m0s"}}},
		{"back in redis, failures count from zero", cfg,
			join([]step{{0, "breaker"}, {time.Second, "ok"}, {61 * time.Second, "ok"}}, fails(62*time.Second, 2)), ModeRedis,
			[]transition{{ModeRedis, ModeLocal, "breaker opened"}, {ModeLocal, ModeRedis, "healthy for 1m0s"}}},
		{"time in local counts from the last entry", cfg,
			[]step{{0, "breaker"}, {time.Second, "ok"}, {61 * time.Second, "ok"}, {4 * time.Minute, "breaker"}, {6 * time.Minute, "tick"}}, ModeLocal,
			[]transition{{ModeRedis, ModeLocal, "breaker opened"}, {ModeLocal, ModeRedis, "healthy for 1m0s"}, {ModeRedis, ModeLocal, "breaker opened"}}},
		{"tick in redis does nothing", cfg, []step{{time.Hour, "tick"}}, ModeRedis, nil},
	}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newModeMachine(tt.cfg, t0)
			var got []transition
			for _, s := range tt.steps {
				now := t0.Add(s.at)
				var tr transition
				var ok bool
				switch s.input {
				case "ok":
					tr, ok = m.checkResult(true, now)
				case "fail":
					tr, ok = m.checkResult(false, now)
				case "breaker":
					tr, ok = m.redisDown("breaker opened", now)
				case "tick":
					tr, ok = m.tick(now)
				}
				if ok {
					got = append(got, tr)
				}
			}
			if m.mode != tt.want {
				t.Fatalf("mode = %s, want %s (transitions %+v)", m.mode, tt.want, got)
			}
			if len(got) != len(tt.trans) {
				t.Fatalf("transitions = %+v, want %+v", got, tt.trans)
			}
			for i := range got {
				if got[i] != tt.trans[i] {
					t.Fatalf("transition %d = %+v, want %+v", i, got[i], tt.trans[i])
				}
			}
		})
	}
}

func TestModeMachineDefaults(t *testing.T) {
	t0 := time.Now()
	m := newModeMachine(ModeConfig{}, t0)
	for i := range 2 {
		if _, ok := m.checkResult(false, t0.Add(time.Duration(i)*time.Second)); ok {
			t.Fatalf("left redis after %d failures", i+1)
		}
	}
	if tr, ok := m.checkResult(false, t0.Add(2*time.Second)); !ok || tr.To != ModeLocal {
		t.Fatalf("default: 3 failures must give local, got %+v %v", tr, ok)
	}
	m.checkResult(true, t0.Add(3*time.Second))
	if _, ok := m.checkResult(true, t0.Add(62*time.Second)); ok {
		t.Fatal("recovered before the default 60s")
	}
	if tr, ok := m.checkResult(true, t0.Add(63*time.Second)); !ok || tr.To != ModeRedis {
		t.Fatalf("default: 60s healthy must give redis, got %+v %v", tr, ok)
	}
}

func TestDivideLimits(t *testing.T) {
	in := []decide.Limit{{Requests: 100}, {Rate: 10, Burst: 3}, {Requests: 1}}
	got := divideLimits(in, 4)
	want := []decide.Limit{{Requests: 25}, {Rate: 2, Burst: 1}, {Requests: 1}}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("limit %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if in[0].Requests != 100 {
		t.Fatal("divideLimits changed the rule's limits")
	}
}
