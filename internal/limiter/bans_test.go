package limiter

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/event"
)

func TestBanSet(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	set := NewBanSet(prometheus.NewRegistry())
	set.replace([]event.Ban{
		{Action: event.ActionBan, Scope: event.ScopeIP, Subject: "203.0.113.7", ExpiresAt: now.Add(time.Hour)},
		{Action: event.ActionBan, Scope: event.ScopeUser, Subject: "u-1", ExpiresAt: now.Add(time.Minute)},
		{Action: event.ActionBan, Scope: "planet", Subject: "x", ExpiresAt: now.Add(time.Hour)},
	}, 0)
	tests := []struct {
		name           string
		scope, subject string
		at             time.Time
		want           bool
	}{
		{"banned ip", event.ScopeIP, "203.0.113.7", now, true},
		{"same value, other scope", event.ScopeUser, "203.0.113.7", now, false},
		{"banned user", event.ScopeUser, "u-1", now, true},
		{"expired", event.ScopeUser, "u-1", now.Add(time.Minute), false},
		{"unknown scope ignored", "planet", "x", now, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			until, ok := set.Banned(tt.scope, tt.subject, tt.at)
			if ok != tt.want || (ok && !until.After(tt.at)) {
				t.Fatalf("Banned = %v, %v; want %v", until, ok, tt.want)
			}
		})
	}
	set.Apply(event.ActionUnban, event.ScopeIP, "203.0.113.7", time.Time{})
	set.Apply(event.ActionBan, event.ScopeIP, "198.51.100.1", now.Add(time.Hour))
	if _, ok := set.Banned(event.ScopeIP, "203.0.113.7", now); ok {
		t.Fatal("unban not applied")
	}
	if _, ok := set.Banned(event.ScopeIP, "198.51.100.1", now); !ok {
		t.Fatal("ban not applied")
	}
	set.Prune(now.Add(2 * time.Minute))
	if got := testutil.ToFloat64(set.sizes.WithLabelValues(event.ScopeUser)); got != 0 {
		t.Fatalf("user bans after prune = %v, want 0", got)
	}
	if got := testutil.ToFloat64(set.sizes.WithLabelValues(event.ScopeIP)); got != 1 {
		t.Fatalf("ip bans = %v, want 1", got)
	}
}

// A failing sync keeps the bans in memory: they stay enforced while Redis
// is away.
func TestSyncBansKeepsBansWhenTheSourceFails(t *testing.T) {
	set := NewBanSet(prometheus.NewRegistry())
	var calls atomic.Int32
	list := func(context.Context) ([]event.Ban, error) {
		if calls.Add(1) == 1 {
			return []event.Ban{{Action: event.ActionBan, Scope: event.ScopeIP, Subject: "203.0.113.9", ExpiresAt: time.Now().Add(time.Hour)}}, nil
		}
		return nil, errors.New("redis down")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { SyncBans(ctx, set, list, 5*time.Millisecond, zap.NewNop()); close(done) }()
	for calls.Load() < 4 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	if _, ok := set.Banned(event.ScopeIP, "203.0.113.9", time.Now()); !ok {
		t.Fatal("ban lost after failed resyncs")
	}
}

// TestBanSetLoadKeepsNewerChanges: a change applied while a full load is
// reading the blacklist survives the load, whether the load read it or not;
// a change applied before the load began yields to what the load read, and
// so do all changes at the next load.
func TestBanSetLoadKeepsNewerChanges(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	banA := func(set *BanSet) { set.Apply(event.ActionBan, event.ScopeIP, "a", now.Add(time.Hour)) }
	unbanA := func(set *BanSet) { set.Apply(event.ActionUnban, event.ScopeIP, "a", time.Time{}) }
	none := func(*BanSet) {}
	tests := []struct {
		name          string
		first         []string          // subjects banned by the first load
		before        func(set *BanSet) // applied between the two loads
		during        func(set *BanSet) // applied while the second load reads
		second, third []string          // subjects the second and third loads read
		afterSecond   bool              // a banned after the second load
		afterThird    bool              // a banned after the third
	}{
		{"ban the load missed", nil, none, banA, nil, nil, true, false},
		{"unban the load missed", []string{"a"}, none, unbanA, []string{"a"}, []string{"a"}, false, true},
		{"ban the load read too", nil, none, banA, []string{"a"}, nil, true, false},
		{"unban the load read too", []string{"a"}, none, unbanA, nil, []string{"a"}, false, true},
		{"ban before the load began", nil, banA, none, nil, nil, false, false},
		{"unban before the load began", []string{"a"}, unbanA, none, []string{"a"}, nil, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set := NewBanSet(prometheus.NewRegistry())
			load := func(subjects []string, during func(*BanSet)) {
				t.Helper()
				err := set.Load(ctx, func(context.Context) ([]event.Ban, error) {
					during(set)
					var bans []event.Ban
					for _, s := range subjects {
						bans = append(bans, event.Ban{Action: event.ActionBan, Scope: event.ScopeIP, Subject: s, ExpiresAt: now.Add(time.Hour)})
					}
					return bans, nil
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			banned := func() bool { _, ok := set.Banned(event.ScopeIP, "a", now); return ok }
			load(tt.first, none)
			tt.before(set)
			load(tt.second, tt.during)
			if got := banned(); got != tt.afterSecond {
				t.Errorf("after the load: banned = %v, want %v", got, tt.afterSecond)
			}
			load(tt.third, none)
			if got := banned(); got != tt.afterThird {
				t.Errorf("after the next load: banned = %v, want %v", got, tt.afterThird)
			}
		})
	}
}
