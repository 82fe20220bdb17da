package lease

import (
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
)

// The ways a lease goes back to Redis before it ends: its key goes idle or
// is evicted (Sweep), its rule changes (Drop), its key is found past its
// limit (Revoke), or the limiter stops (Sweep, all).

// giveBack returns the call giving back e's lease (cost 0, nothing asked)
// and empties the lease; false when it holds nothing still lasting. The
// units the call out carries as spent are its own to settle.
func giveBack(e *entry, now time.Time) (decide.Call, bool) {
	if e.until == 0 || !now.Before(e.expire) || e.left == 0 {
		return decide.Call{}, false
	}
	c := e.call
	c.Lease = decide.Lease{Until: e.until, Spent: e.spent, Unspent: e.left}
	e.end()
	return c, true
}

// evict drops the least recently used key of a small sample of sh; its
// lease goes to the give-backs.
func (t *Table) evict(sh *shard, now time.Time) {
	var victim Key
	var oldest *entry
	seen := 0
	for k, e := range sh.entries {
		if oldest == nil || e.used.Before(oldest.used) {
			victim, oldest = k, e
		}
		if seen++; seen == 5 {
			break
		}
	}
	if oldest == nil {
		return
	}
	delete(sh.entries, victim)
	if c, ok := giveBack(oldest, now); ok {
		t.queueReturn(sh, c, c.Lease)
	}
}

// queueReturn queues the give-back of l, a lease of call's key, for the
// next Sweep; past a bound the units stay stranded until the lease ends.
func (t *Table) queueReturn(sh *shard, call decide.Call, l decide.Lease) {
	if len(sh.returns) < t.perShard+16 {
		call.Cost, call.Lease = 0, l
		sh.returns = append(sh.returns, call)
	}
}

// Sweep returns the calls giving back the leases of keys idle since Idle
// before now, and those queued (evicted and revoked keys, late grants),
// and forgets idle keys. All gives back every lease and forgets every key:
// the limiter stops.
func (t *Table) Sweep(now time.Time, all bool) []decide.Call {
	return t.release(now, all, func(e *entry) bool { return all || now.Sub(e.used) >= t.cfg.Idle })
}

// Drop returns the calls giving back the leases of the keys whose terms
// the rules no longer decide alike, and forgets them: keep(state, limits)
// reports whether a call of that state key under those limits decides under
// the rules now in force as it did when its lease was taken. The leases of
// the others stay, in use.
func (t *Table) Drop(now time.Time, keep func(state string, limits []decide.Limit) bool) []decide.Call {
	return t.release(now, false, func(e *entry) bool { return !keep(e.call.Keys.State, e.call.Limits) })
}

// release gives back the leases of the keys that match, and forgets them;
// a key whose call is out stays, empty, unless all, so that the answer
// finds it (its grant goes back with the next sweep).
func (t *Table) release(now time.Time, all bool, match func(*entry) bool) []decide.Call {
	var calls []decide.Call
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		calls = append(calls, sh.returns...)
		sh.returns = sh.returns[:0]
		for k, e := range sh.entries {
			if !match(e) {
				continue
			}
			if c, ok := giveBack(e, now); ok {
				calls = append(calls, c)
			}
			if !e.busy || all {
				delete(sh.entries, k)
			}
		}
		sh.mu.Unlock()
	}
	return calls
}

// Revoke ends the leases of the key state, under every terms: Redis found
// it past its limit at now (a rule that debits denied calls). Their units
// go back with the next Sweep, and so do grants that calls sent before now
// bring; until Redis finds the key within its limit again, its calls go to
// Redis. It reports whether the other limiters should be told, which is at
// most once a Revalidate for a key this limiter tracks: their leases answer
// no longer than that without a call Redis found within the limit.
func (t *Table) Revoke(state string, now time.Time) (tell bool) {
	sh := t.shard(state)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	tell = true
	for _, e := range sh.entries {
		if e.call.Keys.State == state && now.Sub(e.noticed) < t.cfg.Revalidate {
			tell = false
		}
	}
	for _, e := range sh.entries {
		if e.call.Keys.State != state {
			continue
		}
		if c, ok := giveBack(e, now); ok {
			t.queueReturn(sh, c, c.Lease)
		}
		e.end()
		e.revoked, e.checked = now, time.Time{}
		if tell {
			e.noticed = now
		}
	}
	return tell
}
