package detector

import (
	"sync"
	"time"
)

// overflowKey stands for every key a full logThrottle cannot track.
const overflowKey = "\x00overflow"

// logThrottle lets one log line per key through per interval, so a stream
// of bad events (or a limiter whose clock jumped) logs a line per interval,
// not one per event or batch. Some keys come from events (the instance
// that stamped a future event), so at most maxKeys are tracked: when full,
// keys whose interval has passed are forgotten, and if none has, the new
// key shares overflowKey's line with every other untracked key. It is safe
// for concurrent use.
type logThrottle struct {
	interval time.Duration
	maxKeys  int

	mu   sync.Mutex
	keys map[string]*throttleState
}

type throttleState struct {
	last       time.Time
	suppressed int
}

func newLogThrottle(interval time.Duration, maxKeys int) *logThrottle {
	return &logThrottle{interval: interval, maxKeys: maxKeys, keys: make(map[string]*throttleState)}
}

// allow reports whether a line for key may be logged at now and, if so, how
// many were held back for it since its previous line.
func (t *logThrottle) allow(key string, now time.Time) (ok bool, suppressed int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	st, found := t.keys[key]
	if !found {
		if len(t.keys) >= t.maxKeys {
			t.forgetQuiet(now)
		}
		if len(t.keys) >= t.maxKeys {
			key = overflowKey
			st, found = t.keys[key]
		}
		if !found {
			st = &throttleState{}
			t.keys[key] = st
		}
	}
	if found && now.Sub(st.last) < t.interval {
		st.suppressed++
		return false, 0
	}
	suppressed = st.suppressed
	st.last, st.suppressed = now, 0
	return true, suppressed
}

// forgetQuiet drops the keys whose interval has passed: their next line is
// due anyway, so forgetting them loses only their suppressed count.
func (t *logThrottle) forgetQuiet(now time.Time) {
	for k, st := range t.keys {
		if now.Sub(st.last) >= t.interval {
			delete(t.keys, k)
		}
	}
}
