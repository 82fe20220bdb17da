package console

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/adminclient"
	"github.com/ratewarden/ratewarden/internal/event"
)

// countingAdmin answers the admin API's reads and counts them.
type countingAdmin struct {
	mu                 sync.Mutex
	bans, rules, modes int
	fail               bool
}

func (a *countingAdmin) count(n *int) {
	a.mu.Lock()
	*n++
	a.mu.Unlock()
}

func (a *countingAdmin) Bans(context.Context) ([]event.Ban, error) {
	a.count(&a.bans)
	if a.fail {
		return nil, errors.New("admin API down")
	}
	return []event.Ban{{Subject: "192.0.2.1"}}, nil
}

func (a *countingAdmin) Rules(context.Context) (adminclient.Rules, error) {
	a.count(&a.rules)
	return adminclient.Rules{Version: "v1"}, nil
}

func (a *countingAdmin) Mode(context.Context) (string, error) {
	a.count(&a.modes)
	return "redis", nil
}

func (a *countingAdmin) Ban(context.Context, string, string, time.Duration, string, string) (event.Ban, bool, error) {
	return event.Ban{}, true, nil
}
func (a *countingAdmin) Lift(context.Context, string, string, string, string) error { return nil }
func (a *countingAdmin) PutRule(context.Context, string, []byte, string) error      { return nil }
func (a *countingAdmin) DeleteRule(context.Context, string, string) error           { return nil }
func (a *countingAdmin) calls() (int, int, int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.bans, a.rules, a.modes
}

// Pages asking for the bans, rules and mode within liveTTL share one call
// of the admin API each, concurrent ones included; past the TTL, or after
// an action changed them, the next page asks again. A failure is not kept.
func TestLiveAsksTheAdminAPIOncePerTTL(t *testing.T) {
	admin := &countingAdmin{}
	now := time.Now()
	var clock sync.Mutex
	l := &live{admin: admin, now: func() time.Time { clock.Lock(); defer clock.Unlock(); return now }}
	ctx := context.Background()

	var pages sync.WaitGroup
	for range 20 {
		pages.Go(func() {
			if bans, err := l.Bans(ctx); err != nil || len(bans) != 1 {
				t.Errorf("bans %v, %v", bans, err)
			}
			if r, err := l.Rules(ctx); err != nil || r.Version != "v1" {
				t.Errorf("rules %v, %v", r, err)
			}
			if m, err := l.Mode(ctx); err != nil || m != "redis" {
				t.Errorf("mode %q, %v", m, err)
			}
		})
	}
	pages.Wait()
	if b, r, m := admin.calls(); b != 1 || r != 1 || m != 1 {
		t.Fatalf("20 pages called bans %d, rules %d, mode %d times; want once each", b, r, m)
	}

	if err := l.Lift(ctx, "ip", "192.0.2.1", "verified", "alice"); err != nil {
		t.Fatal(err)
	}
	_, _ = l.Bans(ctx)
	_, _ = l.Rules(ctx)
	if b, r, _ := admin.calls(); b != 2 || r != 1 {
		t.Errorf("after a lift: bans %d, rules %d calls; want the bans asked again (2), the rules still cached (1)", b, r)
	}

	clock.Lock()
	now = now.Add(liveTTL)
	clock.Unlock()
	_, _ = l.Mode(ctx)
	if _, _, m := admin.calls(); m != 2 {
		t.Errorf("past the TTL the mode was asked %d times in all, want 2", m)
	}

	clock.Lock()
	now = now.Add(liveTTL)
	clock.Unlock()
	admin.fail = true
	if _, err := l.Bans(ctx); err == nil {
		t.Fatal("a failed call answered without error")
	}
	admin.fail = false
	if bans, err := l.Bans(ctx); err != nil || len(bans) != 1 {
		t.Fatalf("after a failure: %v, %v (a failure must not be cached)", bans, err)
	}
}
