package limiter

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/event"
)

// Blacklist is the shared list of bans as the limiter follows it
// (redisfleet.Blacklist): read in full, and changes as they happen.
type Blacklist interface {
	// Active lists the bans in force at now.
	Active(ctx context.Context, now time.Time) ([]event.Ban, error)
	// SubscribeResync calls onChange for every change until ctx ends, and
	// onResync each time the subscription is (re)established: changes sent
	// while it was down are lost. Both run on the caller's goroutine.
	SubscribeResync(ctx context.Context, onChange func(event.BanChange), onResync func()) error
}

// BanFollower keeps a BanSet current with the blacklist: the whole list at
// every (re)subscription and every resync interval, changes as they are
// announced in between.
type BanFollower struct {
	set   *BanSet
	list  Blacklist
	every time.Duration
	log   *zap.Logger
}

// NewBanFollower returns a follower loading the whole blacklist into set
// every resync interval (BAN_RESYNC_INTERVAL).
func NewBanFollower(set *BanSet, list Blacklist, resync time.Duration, log *zap.Logger) *BanFollower {
	return &BanFollower{set: set, list: list, every: resync, log: log}
}

// Load loads the whole blacklist once: the warm-up's step.
func (f *BanFollower) Load(ctx context.Context) error {
	return f.set.Load(ctx, f.active)
}

func (f *BanFollower) active(ctx context.Context) ([]event.Ban, error) {
	return f.list.Active(ctx, time.Now())
}

// Run follows the blacklist until ctx ends, on two goroutines it waits for:
// the change subscription, and the periodic full load. It returns nil.
func (f *BanFollower) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Go(func() {
		// Every (re)subscription reloads the whole list, so no change is
		// missed between a load and the subscription.
		err := f.list.SubscribeResync(ctx,
			func(c event.BanChange) { f.set.Apply(c.Action, c.Scope, c.Subject, c.ExpiresAt) },
			func() { _ = f.Load(ctx) }) // on failure the periodic resync retries
		if err != nil && ctx.Err() == nil {
			f.log.Error("ban change subscription ended; bans now follow the periodic resync only", zap.Error(err))
		}
	})
	wg.Go(func() { f.resync(ctx) })
	wg.Wait()
	return nil
}

// resync loads the whole blacklist now and every interval until ctx ends,
// pruning expired entries when a load fails. A failed load keeps the set as
// it is (bans stay enforced while Redis is away) and is retried at the next
// interval.
func (f *BanFollower) resync(ctx context.Context) {
	t := time.NewTicker(f.every)
	defer t.Stop()
	for {
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := f.Load(lctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			f.log.Warn("ban sync failed, keeping the bans in memory", zap.Error(err))
			f.set.Prune(time.Now())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
