package detector

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/redisfleet"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// The blacklist marker marks an outcome Banned when its address (an IPv6
// client by its prefix) was banned at its time, UserBanned when its user
// (by the user's key) was, and neither once the ban had expired or for
// someone else.
func TestBlacklistMarker(t *testing.T) {
	client := redistest.Client(t)
	prefix := redistest.Prefix(t, client)
	bl := redisfleet.NewBlacklist(client, prefix)
	ctx := context.Background()
	now := time.Now().UTC()
	expires := now.Add(time.Hour)
	for _, s := range []struct{ scope, subject string }{
		{event.ScopeIP, "203.0.113.7"}, {event.ScopeIP, "2001:db8:1:2::/64"}, {event.ScopeUser, "alice"},
	} {
		ban := event.Ban{BanID: "b-" + s.subject, TS: now, Action: event.ActionBan, Scope: s.scope, Subject: s.subject,
			Reason: "manual", DurationS: 3600, ExpiresAt: expires, Source: "test"}
		if _, err := bl.Add(ctx, ban); err != nil {
			t.Fatal(err)
		}
	}
	outs := []*event.Outcome{
		{IP: "203.0.113.7", TS: now},                      // 0: address banned
		{IP: "2001:db8:1:2::99", TS: now},                 // 1: its /64 banned
		{IP: "198.51.100.1", UserID: "ALICE", TS: now},    // 2: the user banned, by key
		{IP: "203.0.113.7", UserID: "alice", TS: now},     // 3: both
		{IP: "203.0.113.7", TS: expires.Add(time.Minute)}, // 4: after the ban
		{IP: "198.51.100.1", UserID: "bob", TS: now},      // 5: nobody banned
		{IP: "2001:db8:1:3::1", UserID: "carol", TS: now}, // 6: another /64
	}
	mark := BlacklistMarker(bl, 64, strings.ToLower)
	if err := mark(ctx, outs); err != nil {
		t.Fatal(err)
	}
	want := []struct{ banned, userBanned bool }{{true, false}, {true, false}, {false, true}, {true, true}, {false, false}, {false, false}, {false, false}}
	for i, o := range outs {
		if o.Banned != want[i].banned || o.UserBanned != want[i].userBanned {
			t.Errorf("outcome %d (%s, %q at %s): banned %v, user banned %v; want %v, %v",
				i, o.IP, o.UserID, o.TS, o.Banned, o.UserBanned, want[i].banned, want[i].userBanned)
		}
	}
}
