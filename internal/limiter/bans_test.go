package limiter

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/rules"
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

// fakeBlacklist is a blacklist in memory: Active fails once failing is
// set, and SubscribeResync announces what is sent on changes.
type fakeBlacklist struct {
	mu      sync.Mutex
	bans    []event.Ban
	failing bool
	loads   atomic.Int32
	changes chan event.BanChange
}

func (f *fakeBlacklist) Active(context.Context, time.Time) ([]event.Ban, error) {
	f.loads.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failing {
		return nil, errors.New("redis down")
	}
	return slices.Clone(f.bans), nil
}

func (f *fakeBlacklist) SubscribeResync(ctx context.Context, onChange func(event.BanChange), onResync func()) error {
	onResync()
	for {
		select {
		case <-ctx.Done():
			return nil
		case c := <-f.changes:
			onChange(c)
		}
	}
}

func (f *fakeBlacklist) set(failing bool, bans ...event.Ban) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failing, f.bans = failing, bans
}

// A follower loads the list at its start, applies the announced changes,
// keeps the bans in memory while loads fail (they stay enforced while Redis
// is away) and returns once ctx ends.
func TestBanFollower(t *testing.T) {
	set := NewBanSet(prometheus.NewRegistry())
	until := time.Now().Add(time.Hour)
	ipBan := event.Ban{Action: event.ActionBan, Scope: event.ScopeIP, Subject: "203.0.113.9", ExpiresAt: until}
	list := &fakeBlacklist{changes: make(chan event.BanChange)}
	list.set(false, ipBan)
	f := NewBanFollower(set, list, 5*time.Millisecond, zap.NewNop())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	banned := func(scope, subject string) bool { _, ok := set.Banned(scope, subject, time.Now()); return ok }
	for !banned(event.ScopeIP, "203.0.113.9") {
		time.Sleep(time.Millisecond)
	}
	// As in Redis: written to the list, then announced.
	list.set(false, ipBan, event.Ban{Action: event.ActionBan, Scope: event.ScopeUser, Subject: "mallory", ExpiresAt: until})
	list.changes <- event.BanChange{Action: event.ActionBan, Scope: event.ScopeUser, Subject: "mallory", ExpiresAt: until}
	list.changes <- event.BanChange{Action: event.ActionUnban, Scope: event.ScopeUser, Subject: "nobody"} // applied in order: mallory's is in
	if !banned(event.ScopeUser, "mallory") {
		t.Fatal("announced ban not applied")
	}
	list.set(true)
	for n := list.loads.Load() + 3; list.loads.Load() < n; {
		time.Sleep(time.Millisecond)
	}
	if !banned(event.ScopeIP, "203.0.113.9") || !banned(event.ScopeUser, "mallory") {
		t.Fatal("bans lost after failed resyncs")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v, want nil", err)
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

// An IPv6 ban names an address or a prefix; BannedAddr finds a client by
// any ban that covers it, whatever the length, and IPv4 stays exact.
func TestBanSetIPv6Prefixes(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	set := NewBanSet(prometheus.NewRegistry())
	ban := func(subject string, d time.Duration) event.Ban {
		return event.Ban{Action: event.ActionBan, Scope: event.ScopeIP, Subject: subject, ExpiresAt: now.Add(d)}
	}
	set.replace([]event.Ban{
		ban("203.0.113.7", time.Hour),
		ban("2001:db8:1:2::/64", time.Hour),     // a grouped client (detection.ipv6_prefix 64)
		ban("2001:db8:7::/48", 2*time.Hour),     // another grouping
		ban("2001:db8:7:1::/64", 3*time.Hour),   // inside the /48, longer
		ban("2001:db8:9::5", time.Hour),         // an address (ipv6_prefix 128, or before grouping)
		ban("2001:DB8:A::1:0/112", time.Minute), // written by hand: kept in canonical form
		ban("2001:db8:b::/64", -time.Minute),    // expired
		ban("not an ip", time.Hour),             // listed, bans nobody
		ban("::ffff:198.51.100.1", time.Hour),   // IPv4-mapped: an IPv4 ban
		ban("::/0", time.Hour),                  // never written by the services: bans nobody
		ban("2001:d00::/24", time.Hour),         // shorter than /32: bans nobody
	}, 0)
	tests := []struct {
		ip   string
		want time.Duration // 0: not banned
	}{
		{"203.0.113.7", time.Hour},
		{"203.0.113.8", 0},
		{"198.51.100.1", time.Hour},
		{"::ffff:198.51.100.1", time.Hour},
		{"2001:db8:1:2::1", time.Hour},
		{"2001:db8:1:2:ffff:ffff:ffff:ffff", time.Hour},
		{"2001:db8:1:3::1", 0},
		{"2001:db8:7:ffff::1", 2 * time.Hour},
		{"2001:db8:7:1::1", 3 * time.Hour}, // the latest of the bans covering it
		{"2001:db8:9::5", time.Hour},
		{"2001:db8:9::6", 0},
		{"2001:db8:a::1:1234", time.Minute},
		{"2001:db8:b::1", 0},
		{"2001:d00::1", 0},
	}
	for _, tt := range tests {
		t.Run(tt.ip, func(t *testing.T) {
			a := netip.MustParseAddr(tt.ip)
			for _, addr := range []netip.Addr{a, {}} { // an invalid Addr: parsed from the text
				until, ok := set.BannedAddr(addr, tt.ip, now)
				if ok != (tt.want != 0) || (ok && !until.Equal(now.Add(tt.want))) {
					t.Fatalf("BannedAddr(%v, %s) = %v, %v; want banned for %v", addr, tt.ip, until, ok, tt.want)
				}
			}
		})
	}
	if _, ok := set.Banned(event.ScopeIP, "2001:db8:a::1:0/112", now); !ok {
		t.Error("a hand-written prefix is not listed in canonical form")
	}

	set.Apply(event.ActionUnban, event.ScopeIP, "2001:db8:7::/48", time.Time{})
	if _, ok := set.BannedAddr(netip.MustParseAddr("2001:db8:7:ffff::1"), "2001:db8:7:ffff::1", now); ok {
		t.Error("unban of the /48 not applied")
	}
	if _, ok := set.BannedAddr(netip.MustParseAddr("2001:db8:7:1::1"), "2001:db8:7:1::1", now); !ok {
		t.Error("unban of the /48 lifted the /64 inside it")
	}
	set.Apply(event.ActionBan, event.ScopeIP, "2001:db8:c::/56", now.Add(time.Hour))
	if _, ok := set.BannedAddr(netip.MustParseAddr("2001:db8:c:ff::1"), "2001:db8:c:ff::1", now); !ok {
		t.Error("a ban of a new prefix length not applied")
	}
	set.Prune(now.Add(90 * time.Minute))
	for _, ip := range []string{"2001:db8:1:2::1", "2001:db8:c::1", "2001:db8:9::5"} {
		if _, ok := set.BannedAddr(netip.MustParseAddr(ip), ip, now); ok {
			t.Errorf("%s still banned after the prune", ip)
		}
	}
	if _, ok := set.BannedAddr(netip.MustParseAddr("2001:db8:7:1::1"), "2001:db8:7:1::1", now); !ok {
		t.Error("the prune dropped a ban that lasts")
	}
	if got := testutil.ToFloat64(set.sizes.WithLabelValues(event.ScopeIP)); got != 1 {
		t.Errorf("ip bans = %v, want 1 (2001:db8:7:1::/64)", got)
	}
}

// The ban check is on every decision: it must not allocate, IPv6 included.
func TestBannedAddrDoesNotAllocate(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	set := NewBanSet(prometheus.NewRegistry())
	set.replace([]event.Ban{
		{Action: event.ActionBan, Scope: event.ScopeIP, Subject: "2001:db8:1:2::/64", ExpiresAt: now.Add(time.Hour)},
		{Action: event.ActionBan, Scope: event.ScopeIP, Subject: "2001:db8::9", ExpiresAt: now.Add(time.Hour)},
	}, 0)
	v4, v6 := netip.MustParseAddr("203.0.113.7"), netip.MustParseAddr("2001:db8:1:2::1")
	if n := testing.AllocsPerRun(100, func() {
		set.BannedAddr(v4, "203.0.113.7", now)
		set.BannedAddr(v6, "2001:db8:1:2::1", now)
	}); n != 0 {
		t.Errorf("BannedAddr allocates %v times", n)
	}
}

// capturePublisher keeps the events it is given.
type capturePublisher struct {
	mu     sync.Mutex
	events [][]byte
}

func (p *capturePublisher) Publish(_, value []byte) bool {
	p.mu.Lock()
	p.events = append(p.events, value)
	p.mu.Unlock()
	return true
}

// A ban of an IPv6 /64 denies every address in it, and the events keep
// the full address; an IPv4 ban is of its address alone, as before.
func TestServiceDeniesEveryAddressOfABannedPrefix(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	bans := NewBanSet(prometheus.NewRegistry())
	bans.Apply(event.ActionBan, event.ScopeIP, "2001:db8:1:2::/64", now.Add(time.Hour))
	bans.Apply(event.ActionBan, event.ScopeIP, "203.0.113.7", now.Add(time.Hour))
	pub := &capturePublisher{}
	svc := New(Config{Instance: "test", Now: func() time.Time { return now }, Bans: bans},
		compileRules(t, modeRules), OpaqueErrors(&fakeDecider{}), pub, zap.NewNop(), prometheus.NewRegistry())
	tests := []struct {
		ip     string
		banned bool
	}{
		{"2001:db8:1:2::1", true},
		{"2001:db8:1:2:dead:beef:0:1", true},
		{"2001:db8:1:2:ffff:ffff:ffff:ffff", true},
		{"2001:db8:1:3::1", false},
		{"203.0.113.7", true},
		{"203.0.113.8", false},
	}
	for _, tt := range tests {
		t.Run(tt.ip, func(t *testing.T) {
			a := netip.MustParseAddr(tt.ip)
			d := new(Decision)
			svc.Check(context.Background(), &rules.Request{IP: a.String(), Addr: a, Endpoint: "/local", Method: "GET", Cost: 1}, d)
			if tt.banned != (d.Reason == event.ReasonBanned) || d.Allowed == tt.banned {
				t.Fatalf("decision %s allowed=%v; want banned=%v", d.Reason, d.Allowed, tt.banned)
			}
			if tt.banned && d.RetryAfter != time.Hour {
				t.Errorf("retry after %v, want 1h", d.RetryAfter)
			}
			pub.mu.Lock()
			last := pub.events[len(pub.events)-1]
			pub.mu.Unlock()
			ev, err := event.DecodeDecision(last)
			if err != nil || ev.IP != tt.ip {
				t.Errorf("event ip %q (%v), want the full address %q", ev.IP, err, tt.ip)
			}
		})
	}
}
