package limiter

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// Mode returns the service's decision mode: redis, local or permissive.
func (s *Service) Mode() Mode { return *s.mode.Load() }

// Start starts the lease renewer, and the health checker when
// Config.Health is set: a heartbeat now and every HealthInterval, feeding
// the mode machine. Stop stops them.
func (s *Service) Start() {
	if s.stopRenewer == nil {
		s.startLeases()
	}
	if s.cfg.Health == nil || s.stopHealth != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.stopHealth = cancel
	s.health.Go(func() { s.runHealth(ctx) })
}

// Stop stops the health checker and waits for it; the mode stays as it is.
// Then the lease renewer gives back every lease and stops.
func (s *Service) Stop() {
	if s.stopHealth != nil {
		s.stopHealth()
	}
	s.health.Wait()
	s.stopLeases()
}

func (s *Service) runHealth(ctx context.Context) {
	t := time.NewTicker(s.cfg.HealthInterval)
	defer t.Stop()
	for {
		s.checkHealth(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// checkHealth runs one heartbeat and feeds its outcome to the machine.
func (s *Service) checkHealth(ctx context.Context) {
	beatCtx, cancel := context.WithTimeout(ctx, s.cfg.HealthTimeout)
	live, err := s.cfg.Health.Beat(beatCtx, s.cfg.Now())
	cancel()
	if ctx.Err() != nil { // stopping: not a verdict on Redis
		return
	}
	if err == nil {
		s.beatCounted(int64(live), s.cfg.Now())
	} else {
		s.metrics.healthFailures.WithLabelValues(s.backend.ErrorClass(err)).Inc()
		s.log.Debug("redis health check failed", zap.Error(err))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.machine.checkResult(err == nil, s.cfg.Now()); ok {
		s.apply(t)
	}
}

// RedisDown moves the mode out of redis at once, for reason (logged): the
// Decider's breaker opened, or the limiter learned otherwise that Redis
// does not answer (its warm-up did not complete). Healthy checks bring it
// back.
func (s *Service) RedisDown(reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.machine.redisDown(reason, s.cfg.Now()); ok {
		s.apply(t)
	}
}

// apply makes t the service's mode; s.mu is held.
func (s *Service) apply(t transition) {
	s.mode.Store(&t.To)
	s.metrics.setMode(t.To)
	s.log.Warn("limiter mode changed", zap.String("old", string(t.From)), zap.String("new", string(t.To)),
		zap.String("reason", t.Reason), zap.Int64("live_instances", s.live.Load()), zap.String("live_instances_source", s.liveSource()))
}

// liveSource is where the live count comes from; s.fleet.mu must not be held.
func (s *Service) liveSource() string {
	s.fleet.mu.Lock()
	defer s.fleet.mu.Unlock()
	return s.fleet.source
}
