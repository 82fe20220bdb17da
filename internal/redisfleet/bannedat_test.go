package redisfleet

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

func TestBannedAt(t *testing.T) {
	client := redistest.Client(t)
	bl := NewBlacklist(client, redistest.Prefix(t, client))
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	if _, err := bl.Add(ctx, event.Ban{BanID: "b1", TS: now, Action: event.ActionBan, Scope: event.ScopeIP, Subject: "203.0.113.9",
		Reason: "probing", DurationS: 60, ExpiresAt: now.Add(time.Minute), Source: "detector"}); err != nil {
		t.Fatal(err)
	}
	got, err := bl.BannedAt(ctx, []Sighting{
		{event.ScopeIP, "203.0.113.9", now},                      // banned then
		{event.ScopeIP, "203.0.113.9", now.Add(2 * time.Minute)}, // after the ban
		{event.ScopeIP, "203.0.113.10", now},                     // never banned
		{event.ScopeUser, "203.0.113.9", now},                    // another scope
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []bool{true, false, false, false}; !slices.Equal(got, want) {
		t.Fatalf("BannedAt = %v, want %v", got, want)
	}
}
