package console

import (
	"sync"
	"time"
)

// loginThrottle bounds the logins of a kind per key: failed ones per client
// network and per name from a network, successful ones per user. At most
// burst, one more each interval. Its state is
// bounded: past max keys, the entry that would be full soonest again is
// forgotten first (it is the least restrictive), so a flood of new keys
// cannot exhaust memory nor free a key under attack sooner than its own
// refill would.
type loginThrottle struct {
	mu       sync.Mutex
	keys     map[string]*failures
	burst    int
	interval time.Duration
	max      int
	now      func() time.Time
}

// failures is a key's debt: how many failures it has left to pay, as of at.
type failures struct {
	debt float64
	at   time.Time
}

func newLoginThrottle(burst int, interval time.Duration, max int, now func() time.Time) *loginThrottle {
	return &loginThrottle{keys: map[string]*failures{}, burst: burst, interval: interval, max: max, now: now}
}

// debt returns f's debt at now, after the refill since f.at.
func (t *loginThrottle) debt(f *failures, now time.Time) float64 {
	return max(0, f.debt-float64(now.Sub(f.at))/float64(t.interval))
}

// allowed reports whether every key may try to log in now: whether one
// more login would keep each within its burst.
func (t *loginThrottle) allowed(keys ...string) bool {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, k := range keys {
		if f, ok := t.keys[k]; ok && t.debt(f, now)+1 > float64(t.burst) {
			return false
		}
	}
	return true
}

// record records a login (of the kind throttled) of every key.
func (t *loginThrottle) record(keys ...string) {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, k := range keys {
		f, ok := t.keys[k]
		if !ok {
			if len(t.keys) >= t.max {
				t.forgetLightest(now)
			}
			f = &failures{}
			t.keys[k] = f
		}
		f.debt, f.at = t.debt(f, now)+1, now
	}
}

// forgetLightest drops the key of the smallest debt.
func (t *loginThrottle) forgetLightest(now time.Time) {
	var lightest string
	least := -1.0
	for k, f := range t.keys {
		if d := t.debt(f, now); least < 0 || d < least {
			lightest, least = k, d
		}
		if least == 0 {
			break
		}
	}
	delete(t.keys, lightest)
}
