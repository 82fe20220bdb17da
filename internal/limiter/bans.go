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
type BanSet struct {
	mu    sync.RWMutex
	bans  map[string]map[string]time.Time // scope → subject → expiry
	sizes *prometheus.GaugeVec
}

// NewBanSet returns an empty set reporting rate_limit_blacklist_size{scope},
// 0 for every scope until the first sync.
func NewBanSet(reg prometheus.Registerer) *BanSet {
	b := &BanSet{
		bans: map[string]map[string]time.Time{event.ScopeIP: {}, event.ScopeUser: {}},
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

// Replace swaps the whole set for bans (a full sync).
func (b *BanSet) Replace(bans []event.Ban) {
	next := map[string]map[string]time.Time{event.ScopeIP: {}, event.ScopeUser: {}}
	for _, ban := range bans {
		if m, ok := next[ban.Scope]; ok && ban.Action == event.ActionBan {
			m[ban.Subject] = ban.ExpiresAt
		}
	}
	b.mu.Lock()
	b.bans = next
	b.mu.Unlock()
	b.report()
}

// Apply records one change: a ban until expires, or an unban.
func (b *BanSet) Apply(action, scope, subject string, expires time.Time) {
	b.mu.Lock()
	if m, ok := b.bans[scope]; ok {
		switch action {
		case event.ActionBan:
			m[subject] = expires
		case event.ActionUnban:
			delete(m, subject)
		}
	}
	b.mu.Unlock()
	b.report()
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
		bans, err := list(lctx)
		cancel()
		switch {
		case err == nil:
			set.Replace(bans)
		case ctx.Err() == nil:
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
