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
	// RecoverAfter is how long health checks must succeed without
	// interruption before the mode returns to redis (default 60s).
	RecoverAfter time.Duration
}

// Transition is one change of mode.
type Transition struct {
	From, To, Reason string
}

// ModeMachine is the decision mode as a function of health checks, breaker
// trips and time: redis → local after FailedChecks failed checks in a row or
// when the breaker opens → permissive after PermissiveAfter in local → redis
// after RecoverAfter of uninterrupted healthy checks. It does no I/O and
// reads no clock; it is not safe for concurrent use.
type ModeMachine struct {
	cfg      ModeConfig
	mode     string
	since    time.Time // when mode was entered
	failures int       // consecutive failed checks, in redis mode
	healthy  time.Time // start of the current run of healthy checks; zero: none
}

// NewModeMachine returns a machine in redis mode at now.
func NewModeMachine(cfg ModeConfig, now time.Time) *ModeMachine {
	if cfg.FailedChecks <= 0 {
		cfg.FailedChecks = 3
	}
	if cfg.RecoverAfter <= 0 {
		cfg.RecoverAfter = 60 * time.Second
	}
	return &ModeMachine{cfg: cfg, mode: ModeRedis, since: now}
}

// Mode returns the current mode.
func (m *ModeMachine) Mode() string { return m.mode }

// CheckResult records a health check ending at now, and returns the
// transition it caused, if any.
func (m *ModeMachine) CheckResult(ok bool, now time.Time) (Transition, bool) {
	if m.mode == ModeRedis {
		if ok {
			m.failures = 0
			return Transition{}, false
		}
		m.failures++
		if m.failures < m.cfg.FailedChecks {
			return Transition{}, false
		}
		return m.enter(ModeLocal, fmt.Sprintf("%d failed health checks", m.failures), now), true
	}
	if !ok {
		m.healthy = time.Time{}
		return m.Tick(now)
	}
	if m.healthy.IsZero() {
		m.healthy = now
	}
	if healthyFor := now.Sub(m.healthy); healthyFor >= m.cfg.RecoverAfter {
		return m.enter(ModeRedis, "healthy for "+healthyFor.String(), now), true
	}
	return m.Tick(now)
}

// BreakerOpened records that decisions kept failing at now: the mode leaves
// redis at once.
func (m *ModeMachine) BreakerOpened(now time.Time) (Transition, bool) {
	if m.mode != ModeRedis {
		// A decision started before the mode changed: it only interrupts
		// the healthy run.
		m.healthy = time.Time{}
		return Transition{}, false
	}
	return m.enter(ModeLocal, "breaker opened", now), true
}

// Tick advances time alone: local becomes permissive after PermissiveAfter.
func (m *ModeMachine) Tick(now time.Time) (Transition, bool) {
	if m.mode != ModeLocal || m.cfg.PermissiveAfter <= 0 {
		return Transition{}, false
	}
	if inLocal := now.Sub(m.since); inLocal >= m.cfg.PermissiveAfter {
		return m.enter(ModePermissive, "local for "+inLocal.String(), now), true
	}
	return Transition{}, false
}

func (m *ModeMachine) enter(mode, reason string, now time.Time) Transition {
	t := Transition{From: m.mode, To: mode, Reason: reason}
	m.mode, m.since, m.failures, m.healthy = mode, now, 0, time.Time{}
	return t
}
