package limiter

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/event"
)

// BanSet is the limiter's in-memory copy of the blacklist, so a ban check
// costs no Redis round trip: loaded in full at start and on every resync,
// and kept current between them by change notifications. It keeps
// enforcing what it holds while Redis is away.
//
// A full load races with the notifications: a change can be applied while
// the load is reading a blacklist that does not hold it yet. So every
// change gets a local version, and a load replays over what it read the
// changes applied since it began. A change applied before the load began
// was committed to Redis before (it is announced after its write), so the
// load read it, or a later one; only the changes since are in doubt.
type BanSet struct {
	mu      sync.RWMutex
	bans    map[string]map[string]time.Time // scope → subject → expiry
	version uint64                          // changes applied so far
	recent  map[banKey]banChange            // the latest change of each subject since the last load began
	sizes   *prometheus.GaugeVec
}

type banKey struct{ scope, subject string }

// banChange is one applied change: a ban until expires, or an unban.
type banChange struct {
	version uint64
	ban     bool
	expires time.Time
}

// NewBanSet returns an empty set reporting rate_limit_blacklist_size{scope},
// 0 for every scope until the first sync.
func NewBanSet(reg prometheus.Registerer) *BanSet {
	b := &BanSet{
		bans:   map[string]map[string]time.Time{event.ScopeIP: {}, event.ScopeUser: {}},
		recent: map[banKey]banChange{},
		sizes: promauto.With(reg).NewGaugeVec(prometheus.GaugeOpts{
			Name: "rate_limit_blacklist_size",
			Help: "Bans held in the limiter's memory, by scope.",
		}, []string{"scope"}),
	}
	b.report()
	return b
}

// Banned reports until when subject is banned in scope, if it is at now.
func (b *BanSet) Banned(scope, subject string, now time.Time) (time.Time, bool) {
	b.mu.RLock()
	until, ok := b.bans[scope][subject]
	b.mu.RUnlock()
	return until, ok && now.Before(until)
}

// Load replaces the set with the full blacklist list returns, keeping the
// changes applied while it was read. On error the set stays as it is.
func (b *BanSet) Load(ctx context.Context, list func(context.Context) ([]event.Ban, error)) error {
	b.mu.RLock()
	since := b.version
	b.mu.RUnlock()
	bans, err := list(ctx)
	if err != nil {
		return err
	}
	b.replace(bans, since)
	return nil
}

// replace swaps the whole set for bans, read after the set was at version
// since, then applies again the changes made after since.
func (b *BanSet) replace(bans []event.Ban, since uint64) {
	next := map[string]map[string]time.Time{event.ScopeIP: {}, event.ScopeUser: {}}
	for _, ban := range bans {
		if m, ok := next[ban.Scope]; ok && ban.Action == event.ActionBan {
			m[ban.Subject] = ban.ExpiresAt
		}
	}
	b.mu.Lock()
	for k, c := range b.recent {
		if c.version <= since {
			delete(b.recent, k) // the load holds it, or a later change
			continue
		}
		c.applyTo(next, k)
	}
	b.bans = next
	b.mu.Unlock()
	b.report()
}

// Apply records one change: a ban until expires, or an unban.
func (b *BanSet) Apply(action, scope, subject string, expires time.Time) {
	if action != event.ActionBan && action != event.ActionUnban {
		return
	}
	k := banKey{scope, subject}
	b.mu.Lock()
	if _, ok := b.bans[scope]; ok {
		b.version++
		c := banChange{version: b.version, ban: action == event.ActionBan, expires: expires}
		b.recent[k] = c
		c.applyTo(b.bans, k)
	}
	b.mu.Unlock()
	b.report()
}

func (c banChange) applyTo(bans map[string]map[string]time.Time, k banKey) {
	if c.ban {
		bans[k.scope][k.subject] = c.expires
	} else {
		delete(bans[k.scope], k.subject)
	}
}

// Prune drops expired bans.
func (b *BanSet) Prune(now time.Time) {
	b.mu.Lock()
	for _, m := range b.bans {
		for s, until := range m {
			if !now.Before(until) {
				delete(m, s)
			}
		}
	}
	b.mu.Unlock()
	b.report()
}

func (b *BanSet) report() {
	b.mu.RLock()
	defer b.mu.RUnlock()
	for scope, m := range b.bans {
		b.sizes.WithLabelValues(scope).Set(float64(len(m)))
	}
}

// SyncBans loads the full blacklist with list now and every interval until
// ctx ends, pruning expired entries in between. A failed load keeps the set
// as it is (bans stay enforced while Redis is away) and is retried at the
// next interval.
func SyncBans(ctx context.Context, set *BanSet, list func(context.Context) ([]event.Ban, error), every time.Duration, log *zap.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := set.Load(lctx, list)
		cancel()
		if err != nil && ctx.Err() == nil {
			log.Warn("ban sync failed, keeping the bans in memory", zap.Error(err))
			set.Prune(time.Now())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
