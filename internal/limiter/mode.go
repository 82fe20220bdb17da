package limiter

import (
	"fmt"
	"time"
)

// ModeConfig sets when the mode changes.
type ModeConfig struct {
	// FailedChecks is the number of consecutive failed health checks that
	// take the mode from redis to local (default 3).
	FailedChecks int
	// PermissiveAfter is the time in local mode after which the mode becomes
	// permissive; 0 never does.
	PermissiveAfter time.Duration
	// RecoverAfter is how long health checks must succeed, interrupted by
	// no two failed checks in a row, before the mode returns to redis
	// (default 60s).
	RecoverAfter time.Duration
}

// transition is one change of mode.
type transition struct {
	From, To Mode
	Reason   string
}

// modeMachine is the decision mode as a function of health checks, breaker
// trips and time: redis → local after FailedChecks failed checks in a row or
// when the breaker opens → permissive after PermissiveAfter in local → redis
// after RecoverAfter of healthy checks, interrupted by no breaker trip and
// by no two failed checks in a row. It does no I/O and
// reads no clock; it is not safe for concurrent use.
type modeMachine struct {
	cfg      ModeConfig
	mode     Mode
	since    time.Time // when mode was entered
	failures int       // consecutive failed checks, in redis mode
	healthy  time.Time // start of the current run of healthy checks; zero: none
	misses   int       // consecutive failed checks, out of redis mode
}

// newModeMachine returns a machine in redis mode at now.
func newModeMachine(cfg ModeConfig, now time.Time) *modeMachine {
	if cfg.FailedChecks <= 0 {
		cfg.FailedChecks = 3
	}
	if cfg.RecoverAfter <= 0 {
		cfg.RecoverAfter = 60 * time.Second
	}
	return &modeMachine{cfg: cfg, mode: ModeRedis, since: now}
}

// checkResult records a health check ending at now, and returns the
// transition it caused, if any.
func (m *modeMachine) checkResult(ok bool, now time.Time) (transition, bool) {
	if m.mode == ModeRedis {
		if ok {
			m.failures = 0
			return transition{}, false
		}
		m.failures++
		if m.failures < m.cfg.FailedChecks {
			return transition{}, false
		}
		return m.enter(ModeLocal, fmt.Sprintf("%d failed health checks", m.failures), now), true
	}
	if !ok {
		// One failed check between healthy ones is a late answer, not
		// an outage: two in a row restart the healthy run.
		if m.misses++; m.misses >= 2 {
			m.healthy = time.Time{}
		}
		return m.tick(now)
	}
	m.misses = 0
	if m.healthy.IsZero() {
		m.healthy = now
	}
	if healthyFor := now.Sub(m.healthy); healthyFor >= m.cfg.RecoverAfter {
		return m.enter(ModeRedis, "healthy for "+healthyFor.String(), now), true
	}
	return m.tick(now)
}

// redisDown records that Redis was found down at now, for reason (the
// breaker opened: decisions kept failing): the mode leaves redis at once.
func (m *modeMachine) redisDown(reason string, now time.Time) (transition, bool) {
	if m.mode != ModeRedis {
		// A decision started before the mode changed: it only interrupts
		// the healthy run.
		m.healthy = time.Time{}
		return transition{}, false
	}
	return m.enter(ModeLocal, reason, now), true
}

// tick advances time alone: local becomes permissive after PermissiveAfter.
func (m *modeMachine) tick(now time.Time) (transition, bool) {
	if m.mode != ModeLocal || m.cfg.PermissiveAfter <= 0 {
		return transition{}, false
	}
	if inLocal := now.Sub(m.since); inLocal >= m.cfg.PermissiveAfter {
		return m.enter(ModePermissive, "local for "+inLocal.String(), now), true
	}
	return transition{}, false
}

func (m *modeMachine) enter(mode Mode, reason string, now time.Time) transition {
	t := transition{From: m.mode, To: mode, Reason: reason}
	m.mode, m.since, m.failures, m.healthy, m.misses = mode, now, 0, time.Time{}, 0
	return t
}
