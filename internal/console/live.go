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

// liveTTL is how long the console reuses the limiters' bans, rules and
// mode: the admin API admits 10 calls a second per source, and every page
// of every console user would otherwise call it. An action of the console
// drops what it changed at once.
const liveTTL = time.Second

// live caches what the admin API says of the bans and rules in force and
// of the limiter's mode; a page that needs one while a call for it is under
// way waits for that call.
type live struct {
	admin Admin
	now   func() time.Time
	calls singleflight.Group

	mu sync.Mutex
	// gen counts the console's actions: a call started before one
	// neither caches its answer nor is joined by a page after it.
	gen   uint64
	bans  answer[[]event.Ban]
	rules answer[adminclient.Rules]
	mode  answer[string]
}

// answer is one cached answer of the admin API.
type answer[T any] struct {
	val T
	at  time.Time
	set bool
}

// cachedCall returns slot's answer while it is fresh, else asks for it
// with call, once for every page asking meanwhile. A call started before
// an action (gen) does not keep its answer.
func cachedCall[T any](ctx context.Context, l *live, name string, slot *answer[T], call func(context.Context) (T, error)) (T, error) {
	fresh := func() (T, bool) {
		l.mu.Lock()
		defer l.mu.Unlock()
		return slot.val, slot.set && l.now().Sub(slot.at) < liveTTL
	}
	if val, ok := fresh(); ok {
		return val, nil
	}
	l.mu.Lock()
	gen := l.gen
	l.mu.Unlock()
	v, err, _ := l.calls.Do(name+" "+strconv.FormatUint(gen, 10), func() (any, error) {
		// A call that ended since this page looked has cached its answer.
		if val, ok := fresh(); ok {
			return val, nil
		}
		val, err := call(context.WithoutCancel(ctx))
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		if l.gen == gen {
			*slot = answer[T]{val: val, at: l.now(), set: true}
		}
		l.mu.Unlock()
		return val, nil
	})
	if err != nil {
		var zero T
		return zero, err
	}
	return v.(T), nil
}

func (l *live) Bans(ctx context.Context) ([]event.Ban, error) {
	return cachedCall(ctx, l, "bans", &l.bans, func(ctx context.Context) ([]event.Ban, error) {
		bans, err := l.admin.Bans(ctx)
		if err == nil && bans == nil {
			bans = []event.Ban{}
		}
		return bans, err
	})
}

func (l *live) Rules(ctx context.Context) (adminclient.Rules, error) {
	return cachedCall(ctx, l, "rules", &l.rules, l.admin.Rules)
}

func (l *live) Mode(ctx context.Context) (string, error) {
	return cachedCall(ctx, l, "mode", &l.mode, l.admin.Mode)
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

// forgetRules drops the cached rules after an action changed them.
func (l *live) forgetRules() {
	l.mu.Lock()
	l.rules.set = false
	l.gen++
	l.mu.Unlock()
}

// forgetBans drops the cached bans after an action changed them.
func (l *live) forgetBans() {
	l.mu.Lock()
	l.bans.set = false
	l.gen++
	l.mu.Unlock()
}
