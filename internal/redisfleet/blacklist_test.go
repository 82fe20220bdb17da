package redisfleet

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/abuse"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/redisabuse"
	"github.com/ratewarden/ratewarden/internal/testkit/abusetest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// newTestBlacklist is a blacklist whose clock stands still at t0.
func newTestBlacklist(tb testing.TB, t0 time.Time) (*Blacklist, string) {
	tb.Helper()
	client := redistest.Client(tb)
	prefix := redistest.Prefix(tb, client)
	bl := NewBlacklist(client, prefix)
	bl.now = func() time.Time { return t0 }
	return bl, prefix
}

// banUntil is a manual ban of subject issued at t0, expiring at t0 + d.
func banUntil(t0 time.Time, subject string, d time.Duration) event.Ban {
	return event.Ban{
		BanID: "id-" + subject, TS: t0, Action: event.ActionBan, Scope: event.ScopeUser, Subject: subject,
		Reason: "manual", DurationS: int64(d / time.Second), ExpiresAt: t0.Add(d), Source: "admin",
		Evidence: event.Evidence{SampleEndpoints: []string{}},
	}
}

func TestBlacklistRoundTrip(t *testing.T) {
	redistest.ForEachClock(t, detectT0, func(t *testing.T, t0 time.Time) {
		ctx := context.Background()
		bl, prefix := newTestBlacklist(t, t0)
		a, b := banUntil(t0, "a|b", time.Hour), banUntil(t0, "{x}", 2*time.Hour)
		for _, ban := range []event.Ban{a, b} {
			if _, err := bl.Add(ctx, ban); err != nil {
				t.Fatal(err)
			}
		}
		active, err := bl.Active(ctx, t0)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(active, []event.Ban{a, b}) {
			t.Errorf("active\n got %+v\nwant %+v", active, []event.Ban{a, b})
		}
		if active, _ := bl.Active(ctx, t0.Add(time.Hour)); len(active) != 1 || active[0].Subject != "{x}" {
			t.Errorf("active an hour later: %+v, want {x} only", active)
		}
		redistest.RequireExpiry(t, redistest.Client(t), prefix)
		// The keys outlive the last ban by keep, on any clock.
		for _, key := range []string{bl.setKey(), bl.detailsKey()} {
			ttl := redistest.Client(t).PTTL(ctx, key).Val()
			if longest := 2*time.Hour + keep; ttl <= longest-time.Minute || ttl > longest {
				t.Errorf("%s expires in %v, want %v", key, ttl, longest)
			}
		}

		for _, tc := range []struct {
			scope, subject string
			want           bool
		}{{"user", "a|b", true}, {"user", "a|b", false}, {"ip", "{x}", false}, {"user", "nobody", false}} {
			removed, err := bl.Remove(ctx, tc.scope, tc.subject)
			if err != nil || removed != tc.want {
				t.Errorf("remove %s %s: %v, %v; want %v", tc.scope, tc.subject, removed, err, tc.want)
			}
		}
		if active, _ := bl.Active(ctx, t0); len(active) != 1 || active[0].Subject != "{x}" {
			t.Errorf("active after remove: %+v, want {x} only", active)
		}
		if _, err := bl.Remove(ctx, "bad", "x"); err == nil {
			t.Error("remove with an unknown scope accepted")
		}
	})
}

// TestBlacklistDropsExpired: an Add drops the entries and details that have
// expired; an expired ban is not written.
func TestBlacklistDropsExpired(t *testing.T) {
	redistest.ForEachClock(t, detectT0, func(t *testing.T, t0 time.Time) {
		ctx := context.Background()
		bl, _ := newTestBlacklist(t, t0)
		client := redistest.Client(t)
		if _, err := bl.Add(ctx, banUntil(t0, "old", time.Minute)); err != nil {
			t.Fatal(err)
		}
		bl.now = func() time.Time { return t0.Add(2 * time.Minute) }
		if _, err := bl.Add(ctx, banUntil(t0, "expired", time.Minute)); err != nil {
			t.Fatal(err)
		}
		if _, err := bl.Add(ctx, banUntil(t0, "new", time.Hour)); err != nil {
			t.Fatal(err)
		}
		members, _ := client.ZRange(ctx, bl.setKey(), 0, -1).Result()
		fields, _ := client.HKeys(ctx, bl.detailsKey()).Result()
		if want := []string{"user|new"}; !reflect.DeepEqual(members, want) || !reflect.DeepEqual(fields, want) {
			t.Errorf("set %q, details %q; want %q", members, fields, want)
		}
		if _, err := bl.Add(ctx, event.Ban{BanID: "x", TS: t0, Action: event.ActionBan, Scope: "ip", Subject: "x"}); err == nil {
			t.Error("ban without expiry accepted")
		}
	})
}

// A ban never shortens a longer one in force; a longer one replaces it, and
// only Remove ends one early. Lookup sees what is in force.
func TestBlacklistNeverShortens(t *testing.T) {
	redistest.ForEachClock(t, detectT0, func(t *testing.T, t0 time.Time) {
		ctx := context.Background()
		bl, _ := newTestBlacklist(t, t0)
		add := func(ban event.Ban, wantWritten bool) {
			t.Helper()
			written, err := bl.Add(ctx, ban)
			if err != nil || written != wantWritten {
				t.Fatalf("Add until %v: written %v, %v; want %v", ban.ExpiresAt, written, err, wantWritten)
			}
		}
		inForce := func(want event.Ban) {
			t.Helper()
			got, ok, err := bl.Lookup(ctx, event.ScopeUser, "a", t0)
			if err != nil || !ok || got.BanID != want.BanID || !got.ExpiresAt.Equal(want.ExpiresAt) {
				t.Fatalf("Lookup: %+v %v %v, want ban %s until %v", got, ok, err, want.BanID, want.ExpiresAt)
			}
		}
		hour, short, day := banUntil(t0, "a", time.Hour), banUntil(t0, "a", 2*time.Second), banUntil(t0, "a", 24*time.Hour)
		short.BanID, day.BanID = "short", "day"
		add(hour, true)
		add(short, false)
		inForce(hour)
		add(day, true)
		inForce(day)
		if removed, err := bl.Remove(ctx, event.ScopeUser, "a"); !removed || err != nil {
			t.Fatalf("Remove: %v %v", removed, err)
		}
		if _, ok, err := bl.Lookup(ctx, event.ScopeUser, "a", t0); ok || err != nil {
			t.Fatalf("Lookup after Remove: %v %v, want none", ok, err)
		}
		add(short, true)
		inForce(short)
		if _, ok, _ := bl.Lookup(ctx, event.ScopeUser, "a", t0.Add(3*time.Second)); ok {
			t.Error("Lookup after the ban expired: still in force")
		}
	})
}

// TestBlacklistRemoveForgetsTheDetectorsEvidence: an unban forgets the
// detector's record of the ban, so the detector may ban again, and the
// violations and endpoints that led to it, so a lifted subject is not
// banned again at its next violation (an operator lifting a false
// positive would see it banned anew at once, for longer); escalation still
// counts the first ban, and other offenders keep their windows.
func TestBlacklistRemoveForgetsTheDetectorsEvidence(t *testing.T) {
	redistest.ForEachClock(t, detectT0, func(t *testing.T, t0 time.Time) {
		ctx := context.Background()
		bl, prefix := newTestBlacklist(t, t0)
		l := redisabuse.NewLedger(bl.client, prefix, nil)
		windows := redisabuse.NewWindows(bl.client, prefix)
		spec := abuse.WindowSpec{Violations: []time.Duration{time.Hour}, Scan: 10 * time.Second, ScanCap: 10,
			MaxViolations: 100, Grace: time.Minute}
		n := 0
		violate := func(subject string, at time.Duration) abuse.Tally {
			t.Helper()
			n++
			tallies, err := windows.Record(ctx, spec, []abuse.Sighting{{Offender: abuse.Offender{Scope: event.ScopeIP, Subject: subject},
				EventID: fmt.Sprint("e", n), TS: t0.Add(at), Endpoint: fmt.Sprint("/x/", n), Violation: true}})
			if err != nil {
				t.Fatal(err)
			}
			return tallies[0]
		}
		for i := range 5 {
			violate("a|b", time.Duration(i)*time.Second)
			violate("bystander", time.Duration(i)*time.Second)
		}
		first := abusetest.Claim(t, l, banClaim(event.ScopeIP, "a|b", t0))
		// Settled without the ledger's enforcing, which reads the wall
		// clock: the ban goes to the blacklist, on its clock, here.
		abusetest.Settle(t, l, first.Ban, false)
		if written, err := bl.Add(ctx, first.Ban); err != nil || !written {
			t.Fatalf("add: %v, %v", written, err)
		}
		if again := abusetest.Claim(t, l, banClaim(event.ScopeIP, "a|b", t0.Add(time.Minute))); again.Publish {
			t.Fatalf("claim while banned: %+v, want the ban in force", again)
		}
		bl.now = func() time.Time { return t0.Add(10 * time.Second) }
		removed, err := bl.Remove(ctx, event.ScopeIP, "a|b")
		if err != nil || !removed {
			t.Fatalf("remove: %v, %v", removed, err)
		}
		// A violation from before the lift that the detector reads after it
		// (a detector behind its topic) counts for nothing.
		if tally := violate("a|b", 6*time.Second); tally.Violations != nil || tally.Endpoints != 0 {
			t.Errorf("a violation from before the lift: %v violations, %d endpoints; want no tally", tally.Violations, tally.Endpoints)
		}
		if tally := violate("a|b", 11*time.Second); tally.Violations[0] != 1 || tally.Endpoints != 1 {
			t.Errorf("the lifted subject's next violation: %d violations, %d endpoints; want 1 and 1 (counted afresh)",
				tally.Violations[0], tally.Endpoints)
		}
		if tally := violate("bystander", 11*time.Second); tally.Violations[0] != 6 {
			t.Errorf("another offender's next violation: %d violations, want 6", tally.Violations[0])
		}
		again := abusetest.Claim(t, l, banClaim(event.ScopeIP, "a|b", t0.Add(2*time.Minute)))
		if !again.Publish || again.Ban.DurationS != 7200 {
			t.Errorf("claim after unban: %+v, want a new, escalated ban", again)
		}
	})
}

// An unban of a subject without a ban in force answers false (the admin
// API's 404, "no active ban") and changes nothing: the detector's count of
// that subject's violations stays. A lift mark there would wipe the
// evidence of an offender on its way to a ban, at a request that says it
// did nothing.
func TestBlacklistRemoveWithoutBanKeepsTheEvidence(t *testing.T) {
	redistest.ForEachClock(t, detectT0, func(t *testing.T, t0 time.Time) {
		ctx := context.Background()
		bl, prefix := newTestBlacklist(t, t0)
		windows := redisabuse.NewWindows(bl.client, prefix)
		spec := abuse.WindowSpec{Violations: []time.Duration{time.Hour}, Scan: 10 * time.Second, ScanCap: 10,
			MaxViolations: 100, Grace: time.Minute}
		violate := func(i int) abuse.Tally {
			t.Helper()
			tallies, err := windows.Record(ctx, spec, []abuse.Sighting{{Offender: abuse.Offender{Scope: event.ScopeIP, Subject: "c"},
				EventID: fmt.Sprint("e", i), TS: t0.Add(time.Duration(i) * time.Second), Endpoint: fmt.Sprint("/x/", i), Violation: true}})
			if err != nil {
				t.Fatal(err)
			}
			return tallies[0]
		}
		for i := range 5 {
			violate(i)
		}
		bl.now = func() time.Time { return t0.Add(10 * time.Second) }
		if removed, err := bl.Remove(ctx, event.ScopeIP, "c"); err != nil || removed {
			t.Fatalf("remove of no ban: %v, %v; want false", removed, err)
		}
		// The endpoint of 0s has left the 10s scan window.
		if tally := violate(11); tally.Violations[0] != 6 || tally.Endpoints != 5 {
			t.Errorf("next violation after an unban that found no ban: %d violations, %d endpoints; want 6 and 5",
				tally.Violations[0], tally.Endpoints)
		}
	})
}

// TestBlacklistMissingDetails: an entry is enforced even without details.
func TestBlacklistMissingDetails(t *testing.T) {
	redistest.ForEachClock(t, detectT0, func(t *testing.T, t0 time.Time) {
		ctx := context.Background()
		bl, _ := newTestBlacklist(t, t0)
		if _, err := bl.Add(ctx, banUntil(t0, "a", time.Hour)); err != nil {
			t.Fatal(err)
		}
		redistest.Client(t).HSet(ctx, bl.detailsKey(), "user|a", "{not json")
		active, err := bl.Active(ctx, t0)
		if err != nil || len(active) != 1 || active[0].Subject != "a" || active[0].Scope != "user" ||
			!active[0].ExpiresAt.Equal(t0.Add(time.Hour)) {
			t.Errorf("active %+v, %v", active, err)
		}
	})
}

func TestBlacklistSubscribe(t *testing.T) {
	redistest.ForEachClock(t, detectT0, func(t *testing.T, t0 time.Time) {
		bl, _ := newTestBlacklist(t, t0)
		changes, resyncs := make(chan event.BanChange, 10), make(chan struct{}, 10)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- bl.SubscribeResync(ctx, func(c event.BanChange) { changes <- c }, func() { resyncs <- struct{}{} })
		}()
		wait(t, resyncs)
		// Foreign messages on the channel are skipped.
		redistest.Client(t).Publish(context.Background(), bl.channel(), "ban|ip|notanumber|x")
		if _, err := bl.Add(context.Background(), banUntil(t0, "a|b|", time.Hour)); err != nil {
			t.Fatal(err)
		}
		if _, err := bl.Remove(context.Background(), event.ScopeUser, "a|b|"); err != nil {
			t.Fatal(err)
		}
		want := []event.BanChange{
			{Action: "ban", Scope: "user", Subject: "a|b|", ExpiresAt: t0.Add(time.Hour)},
			{Action: "unban", Scope: "user", Subject: "a|b|"},
		}
		for _, w := range want {
			if got := wait(t, changes); got != w {
				t.Errorf("change %+v, want %+v", got, w)
			}
		}
		cancel()
		if err := wait(t, done); err != nil {
			t.Errorf("subscribe returned %v", err)
		}
	})
}

// An IPv6 prefix (the subject of a grouped IPv6 client, with '/' and ':')
// goes through the set, the details, the change channel and removal as
// it is.
func TestBlacklistIPv6PrefixSubject(t *testing.T) {
	redistest.ForEachClock(t, detectT0, func(t *testing.T, t0 time.Time) {
		ctx := context.Background()
		bl, _ := newTestBlacklist(t, t0)
		changes, resyncs := make(chan event.BanChange, 10), make(chan struct{}, 10)
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			_ = bl.SubscribeResync(sctx, func(c event.BanChange) { changes <- c }, func() { resyncs <- struct{}{} })
		}()
		wait(t, resyncs)

		const prefix, address = "2001:db8:1:2::/64", "2001:db8:1:2::7"
		ban := banUntil(t0, prefix, time.Hour)
		ban.Scope = event.ScopeIP
		other := banUntil(t0, address, time.Hour) // an address of the prefix is a subject of its own
		other.Scope = event.ScopeIP
		for _, b := range []event.Ban{ban, other} {
			if _, err := bl.Add(ctx, b); err != nil {
				t.Fatal(err)
			}
			if got, want := wait(t, changes), (event.BanChange{Action: "ban", Scope: "ip", Subject: b.Subject, ExpiresAt: b.ExpiresAt}); got != want {
				t.Errorf("change %+v, want %+v", got, want)
			}
		}
		active, err := bl.Active(ctx, t0)
		if err != nil || !reflect.DeepEqual(active, []event.Ban{ban, other}) {
			t.Fatalf("active %+v, %v; want %+v", active, err, []event.Ban{ban, other})
		}
		if removed, err := bl.Remove(ctx, event.ScopeIP, prefix); !removed || err != nil {
			t.Fatalf("remove %s: %v, %v", prefix, removed, err)
		}
		if got := wait(t, changes); got != (event.BanChange{Action: "unban", Scope: "ip", Subject: prefix}) {
			t.Errorf("change %+v", got)
		}
		if active, _ := bl.Active(ctx, t0); len(active) != 1 || active[0].Subject != address {
			t.Errorf("active after removing the prefix: %+v, want %s only", active, address)
		}
	})
}

// TestBlacklistSubscribeReconnect: after the server drops the connection
// the subscription comes back, with a resync.
func TestBlacklistSubscribeReconnect(t *testing.T) {
	client := redistest.PrivateClient(t)
	bl := NewBlacklist(client, "rw:")
	changes, resyncs := make(chan event.BanChange, 10), make(chan struct{}, 10)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_ = bl.SubscribeResync(ctx, func(c event.BanChange) { changes <- c }, func() { resyncs <- struct{}{} })
	}()
	wait(t, resyncs)
	if err := client.ClientKillByFilter(context.Background(), "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	wait(t, resyncs)
	if _, err := bl.Add(context.Background(), banUntil(time.Now(), "a", 24*time.Hour*365*10)); err != nil {
		t.Fatal(err)
	}
	if got := wait(t, changes); got.Subject != "a" || got.Action != "ban" {
		t.Errorf("change %+v", got)
	}
}

func TestParseChange(t *testing.T) {
	tests := []struct {
		msg  string
		want event.BanChange
		ok   bool
	}{
		{"ban|ip|1795255200000|203.0.113.7", event.BanChange{Action: "ban", Scope: "ip", Subject: "203.0.113.7", ExpiresAt: time.UnixMilli(1795255200000).UTC()}, true},
		{"unban|user|0|a|b", event.BanChange{Action: "unban", Scope: "user", Subject: "a|b"}, true},
		{"ban|ip|1795255200000|2001:db8:1:2::/64", event.BanChange{Action: "ban", Scope: "ip", Subject: "2001:db8:1:2::/64", ExpiresAt: time.UnixMilli(1795255200000).UTC()}, true},
		{"unban|ip|0|2001:db8::1", event.BanChange{Action: "unban", Scope: "ip", Subject: "2001:db8::1"}, true},
		{"unban|user|5|a", event.BanChange{}, false},
		{"ban|ip|0|a", event.BanChange{}, false},
		{"ban|host|1|a", event.BanChange{}, false},
		{"warn|ip|1|a", event.BanChange{}, false},
		{"ban|ip|1|", event.BanChange{}, false},
		{"ban|ip|1", event.BanChange{}, false},
		{"", event.BanChange{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.msg, func(t *testing.T) {
			got, ok := parseChange(tt.msg)
			if ok != tt.ok || got != tt.want {
				t.Errorf("parseChange(%q) = %+v, %v; want %+v, %v", tt.msg, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func FuzzParseChange(f *testing.F) {
	f.Add("ban|ip|1795255200000|203.0.113.7")
	f.Add("unban|user|0|a|b")
	f.Fuzz(func(t *testing.T, msg string) {
		c, ok := parseChange(msg)
		if !ok {
			return
		}
		ms := int64(0)
		if !c.ExpiresAt.IsZero() {
			ms = c.ExpiresAt.UnixMilli()
		}
		again, ok := parseChange(c.Action + "|" + c.Scope + "|" + strconv.FormatInt(ms, 10) + "|" + c.Subject)
		if !ok || again != c {
			t.Errorf("%q parsed as %+v, which does not round-trip (%+v, %v)", msg, c, again, ok)
		}
	})
}
