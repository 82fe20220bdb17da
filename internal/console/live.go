package console

import (
	"context"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/ratewarden/ratewarden/internal/adminclient"
	"github.com/ratewarden/ratewarden/internal/event"
)

// liveTTL is how long the console reuses the limiters' bans and rules: the
// admin API admits 10 calls a second per source, and every page of every
// console user would otherwise call it. An action of the console drops
// what it changed at once.
const liveTTL = time.Second

// live caches what the admin API says of the bans and rules in force; a
// page that needs them while a call is under way waits for that call.
type live struct {
	admin Admin
	now   func() time.Time
	calls singleflight.Group

	mu sync.Mutex
	// gen counts the console's actions: a call started before one
	// neither caches its answer nor is joined by a page after it.
	gen      uint64
	bans     []event.Ban
	bansAt   time.Time
	rules    adminclient.Rules
	rulesAt  time.Time
	rulesSet bool
}

func (l *live) Bans(ctx context.Context) ([]event.Ban, error) {
	l.mu.Lock()
	if l.bans != nil && l.now().Sub(l.bansAt) < liveTTL {
		defer l.mu.Unlock()
		return l.bans, nil
	}
	gen := l.gen
	l.mu.Unlock()
	v, err, _ := l.calls.Do("bans "+strconv.FormatUint(gen, 10), func() (any, error) {
		bans, err := l.admin.Bans(context.WithoutCancel(ctx))
		if err != nil {
			return nil, err
		}
		if bans == nil {
			bans = []event.Ban{}
		}
		l.mu.Lock()
		if l.gen == gen {
			l.bans, l.bansAt = bans, l.now()
		}
		l.mu.Unlock()
		return bans, nil
	})
	if err != nil {
		return nil, err
	}
	return v.([]event.Ban), nil
}

func (l *live) Rules(ctx context.Context) (adminclient.Rules, error) {
	l.mu.Lock()
	if l.rulesSet && l.now().Sub(l.rulesAt) < liveTTL {
		defer l.mu.Unlock()
		return l.rules, nil
	}
	gen := l.gen
	l.mu.Unlock()
	v, err, _ := l.calls.Do("rules "+strconv.FormatUint(gen, 10), func() (any, error) {
		rules, err := l.admin.Rules(context.WithoutCancel(ctx))
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		if l.gen == gen {
			l.rules, l.rulesAt, l.rulesSet = rules, l.now(), true
		}
		l.mu.Unlock()
		return rules, nil
	})
	if err != nil {
		return adminclient.Rules{}, err
	}
	return v.(adminclient.Rules), nil
}

func (l *live) Ban(ctx context.Context, scope, subject string, d time.Duration, reason, actor string) (event.Ban, bool, error) {
	defer l.forgetBans()
	return l.admin.Ban(ctx, scope, subject, d, reason, actor)
}

func (l *live) Lift(ctx context.Context, scope, subject, reason, actor string) error {
	defer l.forgetBans()
	return l.admin.Lift(ctx, scope, subject, reason, actor)
}

func (l *live) PutRule(ctx context.Context, id string, body []byte, actor string) error {
	defer l.forgetRules()
	return l.admin.PutRule(ctx, id, body, actor)
}

func (l *live) DeleteRule(ctx context.Context, id, actor string) error {
	defer l.forgetRules()
	return l.admin.DeleteRule(ctx, id, actor)
}

// Mode is not cached: the overview alone asks, once a page.
func (l *live) Mode(ctx context.Context) (string, error) { return l.admin.Mode(ctx) }

// forgetRules drops the cached rules after an action changed them.
func (l *live) forgetRules() {
	l.mu.Lock()
	l.rulesSet = false
	l.gen++
	l.mu.Unlock()
}

// forgetBans drops the cached bans after an action changed them.
func (l *live) forgetBans() {
	l.mu.Lock()
	l.bans = nil
	l.gen++
	l.mu.Unlock()
}
