package limiter

import (
	"sync"
	"time"

	"go.uber.org/zap"
)

// The sources of the number of live limiter instances that local limits
// are divided by (rate_limit_live_instances_source).
const (
	// SourceHeartbeats is this run's heartbeats in Redis.
	SourceHeartbeats = "heartbeats"
	// SourceRedis is the count the fleet's heartbeats last kept in Redis,
	// read at the warm-up.
	SourceRedis = "redis"
	// SourceDisk is the count a previous run kept on local disk.
	SourceDisk = "disk"
	// SourceExpected is the configured count (LOCAL_EXPECTED_INSTANCES).
	SourceExpected = "expected"
	// SourceNone is nothing known: this limiter counts itself alone.
	SourceNone = "none"
)

var instanceSources = []string{SourceHeartbeats, SourceRedis, SourceDisk, SourceExpected, SourceNone}

// dropSettle is how long a lower count of live instances must last before
// it is kept (in Redis and on disk): a fleet that stops sees its count
// fall instance by instance, and must not leave 1 behind for its next
// start. A higher count is kept at once.
const dropSettle = time.Minute

// instanceCounts is what a limiter knows of the number of live limiters.
type instanceCounts struct {
	expected int64            // configured; 0: none
	stored   map[string]int64 // from before this run, by SourceRedis and SourceDisk
	beat     int64            // this run's last heartbeat count; 0: none yet
	// complete: the heartbeats have run for an interval, so every live
	// limiter has beaten since this one first did and beat counts them
	// all.
	complete bool
}

// divisor returns the number of instances local limits are divided by,
// and its source: the largest of this run's heartbeat count, the counts
// from before this run until the heartbeats are complete, and the expected
// count; 1 when nothing is known. A limiter that has not yet read the
// heartbeats never takes itself for the only one when anything says
// otherwise.
func (c instanceCounts) divisor() (int64, string) {
	n, source := int64(1), SourceNone
	consider := func(v int64, s string) {
		if v > n || v == n && source == SourceNone && s == SourceHeartbeats { // a beat counting 1 is knowledge
			n, source = v, s
		}
	}
	consider(c.beat, SourceHeartbeats)
	if !c.complete {
		consider(c.stored[SourceRedis], SourceRedis)
		consider(c.stored[SourceDisk], SourceDisk)
	}
	consider(c.expected, SourceExpected)
	return n, source
}

// keptCount is the count of live instances kept for the next start: a
// rise at once, a drop once it has lasted dropSettle (then the largest
// count seen during the drop).
type keptCount struct {
	kept       int64
	lower      int64     // largest count seen since lowerSince, below kept
	lowerSince time.Time // start of the run of lower counts; zero: none
}

// observe records the count n seen at now and returns the count to keep
// and whether it changed.
func (k *keptCount) observe(n int64, now time.Time) (int64, bool) {
	switch {
	case n > k.kept:
		k.kept, k.lower, k.lowerSince = n, 0, time.Time{}
		return n, true
	case n == k.kept:
		k.lower, k.lowerSince = 0, time.Time{}
		return n, false
	}
	if k.lowerSince.IsZero() {
		k.lowerSince = now
	}
	k.lower = max(k.lower, n)
	if now.Sub(k.lowerSince) < dropSettle {
		return k.kept, false
	}
	k.kept, k.lower, k.lowerSince = k.lower, 0, time.Time{}
	return k.kept, true
}

// fleet is the service's knowledge of the other limiters.
type fleet struct {
	mu        sync.Mutex
	counts    instanceCounts
	firstBeat time.Time // of this run; zero: none yet
	kept      keptCount
	keep      func(int64) // stores the kept count; nil: nowhere
	source    string
}

// SetInstances sets the fewest live instances local limits are divided
// among (LOCAL_EXPECTED_INSTANCES; below 2: none), and keep, called with
// the count to keep for the next start whenever it changes (see
// keptCount). Call it before Start.
func (s *Service) SetInstances(expected int64, keep func(int64)) {
	s.fleet.mu.Lock()
	s.fleet.counts.expected, s.fleet.keep = expected, keep
	s.fleet.mu.Unlock()
	s.updateLive()
}

// KnownInstances records n, a count of live instances from before this
// run, read from source (SourceRedis or SourceDisk): until this run's
// heartbeats are complete, local limits are divided by at least n.
func (s *Service) KnownInstances(source string, n int64) {
	if n < 1 {
		return
	}
	s.fleet.mu.Lock()
	if s.fleet.counts.stored == nil {
		s.fleet.counts.stored = map[string]int64{}
	}
	s.fleet.counts.stored[source] = max(s.fleet.counts.stored[source], n)
	s.fleet.kept.kept = max(s.fleet.kept.kept, n) // a later, lower count is kept only once it has lasted
	s.fleet.mu.Unlock()
	s.updateLive()
}

// beatCounted records this run's heartbeat count at now.
func (s *Service) beatCounted(live int64, now time.Time) {
	s.fleet.mu.Lock()
	f := &s.fleet
	if f.firstBeat.IsZero() {
		f.firstBeat = now
	}
	f.counts.beat = max(1, live)
	f.counts.complete = f.counts.complete || now.Sub(f.firstBeat) >= s.cfg.HealthInterval
	kept, changed := f.kept.observe(f.counts.beat, now)
	keep := f.keep
	f.mu.Unlock()
	if changed && keep != nil {
		keep(kept)
	}
	s.updateLive()
}

// updateLive makes the divisor of local limits what the fleet's counts
// say, and logs a change of its source.
func (s *Service) updateLive() {
	s.fleet.mu.Lock()
	n, source := s.fleet.counts.divisor()
	changed := source != s.fleet.source
	s.fleet.source = source
	s.fleet.mu.Unlock()
	s.live.Store(n)
	s.metrics.live.Set(float64(n))
	s.metrics.setLiveSource(source)
	if changed {
		s.log.Info("live instances", zap.Int64("live_instances", n), zap.String("source", source))
	}
}

// setLiveSource marks source as the current one.
func (m *metrics) setLiveSource(source string) {
	for _, s := range instanceSources {
		v := 0.0
		if s == source {
			v = 1
		}
		m.liveSource.WithLabelValues(s).Set(v)
	}
}
