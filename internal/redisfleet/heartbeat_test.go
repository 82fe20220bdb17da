package redisfleet

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

func TestHeartbeatsCountLiveInstances(t *testing.T) {
	client := redistest.Client(t)
	prefix := redistest.Prefix(t, client)
	ctx := context.Background()
	const interval = time.Second
	t0 := time.Now()
	a := NewHeartbeats(client, prefix, "a", interval)
	b := NewHeartbeats(client, prefix, "b", interval)

	steps := []struct {
		name string
		beat *Heartbeats
		at   time.Duration
		want int
	}{
		{"first instance alone", a, 0, 1},
		{"second instance joins", b, 100 * time.Millisecond, 2},
		{"a beats again: still two", a, time.Second, 2},
		{"b is stale after three intervals", a, 3*time.Second + 200*time.Millisecond, 1},
		{"b comes back", b, 3*time.Second + 300*time.Millisecond, 2},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			got, err := st.beat.Beat(ctx, t0.Add(st.at))
			if err != nil {
				t.Fatal(err)
			}
			if got != st.want {
				t.Fatalf("live = %d, want %d", got, st.want)
			}
		})
	}
	if err := b.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := a.Beat(ctx, t0.Add(3*time.Second+400*time.Millisecond)); err != nil || got != 1 {
		t.Fatalf("after leave: live = %d, %v; want 1", got, err)
	}
	if ttl := client.PTTL(ctx, prefix+"{instances}").Val(); ttl <= 0 {
		t.Fatalf("heartbeat set has no expiry: %v", ttl)
	}
}

func TestHeartbeatFailsFastOnDeadRedis(t *testing.T) {
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { _ = dead.Close() })
	h := NewHeartbeats(dead, "rwtest:", "a", time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := h.Beat(ctx, time.Now()); err == nil {
		t.Fatal("beat on a dead redis succeeded")
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("beat took %v", took)
	}
}

// Instances lists the live limiters with the rules each reported; a report
// written before a Redis flush comes back with the next beat, and the
// report of an instance that left or went stale is gone.
func TestHeartbeatsReportRules(t *testing.T) {
	client := redistest.Client(t)
	prefix := redistest.Prefix(t, client)
	ctx := context.Background()
	const interval = time.Second
	now := time.Now()
	a := NewHeartbeats(client, prefix, "a", interval)
	b := NewHeartbeats(client, prefix, "b", interval)
	c := NewHeartbeats(client, prefix, "c", interval)
	applied := now.Add(-time.Second).UTC().Truncate(time.Millisecond)
	for _, h := range []*Heartbeats{a, b, c} {
		if _, err := h.Beat(ctx, now); err != nil {
			t.Fatal(err)
		}
	}
	// b reports nothing until the flush below, then goes stale.
	if err := a.ReportRules(ctx, RulesReport{Version: "3-abc", AppliedAt: applied}); err != nil {
		t.Fatal(err)
	}
	if err := c.ReportRules(ctx, RulesReport{Version: "2-abc", AppliedAt: applied}); err != nil {
		t.Fatal(err)
	}
	got, err := a.Instances(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	want := []Instance{
		{ID: "a", LastSeen: now.Truncate(time.Millisecond).UTC(), Rules: RulesReport{"3-abc", applied}},
		{ID: "b", LastSeen: now.Truncate(time.Millisecond).UTC()},
		{ID: "c", LastSeen: now.Truncate(time.Millisecond).UTC(), Rules: RulesReport{"2-abc", applied}},
	}
	if !equalInstances(got, want) {
		t.Fatalf("instances:\n got %+v\nwant %+v", got, want)
	}

	// The hash is lost (as in a Redis restart): the next beat restores a's.
	client.Del(ctx, prefix+"{instances}:rules")
	if _, err := a.Beat(ctx, now); err != nil {
		t.Fatal(err)
	}
	if err := b.ReportRules(ctx, RulesReport{Version: "1-abc", AppliedAt: applied}); err != nil {
		t.Fatal(err)
	}
	if err := c.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	// Later: b is stale (no beat for three intervals), a beats on.
	later := now.Add(3*interval + 100*time.Millisecond)
	if _, err := a.Beat(ctx, later); err != nil {
		t.Fatal(err)
	}
	got, err = a.Instances(ctx, later)
	if err != nil {
		t.Fatal(err)
	}
	want = []Instance{{ID: "a", LastSeen: later.Truncate(time.Millisecond).UTC(), Rules: RulesReport{"3-abc", applied}}}
	if !equalInstances(got, want) {
		t.Fatalf("after a flush, a leave and a stale instance:\n got %+v\nwant %+v", got, want)
	}
	if fields := client.HKeys(ctx, prefix+"{instances}:rules").Val(); len(fields) != 1 || fields[0] != "a" {
		t.Fatalf("reports left in Redis: %v; want only a's", fields)
	}
}

func equalInstances(a, b []Instance) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].ID != b[i].ID || !a[i].LastSeen.Equal(b[i].LastSeen) ||
			a[i].Rules.Version != b[i].Rules.Version || !a[i].Rules.AppliedAt.Equal(b[i].Rules.AppliedAt) {
			return false
		}
	}
	return true
}

// The count a limiter keeps rides on its next beat and outlives the live
// set; a value that is not a count reads as none.
func TestHeartbeatsKeepTheLastCount(t *testing.T) {
	client := redistest.Client(t)
	prefix := redistest.Prefix(t, client)
	ctx := context.Background()
	a := NewHeartbeats(client, prefix, "a", time.Second)
	if n, err := a.LastCount(ctx); n != 0 || err != nil {
		t.Fatalf("nothing kept: LastCount = %d, %v; want 0, nil", n, err)
	}
	a.KeepCount(3)
	if _, err := a.Beat(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := a.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	b := NewHeartbeats(client, prefix, "b", time.Second)
	if n, err := b.LastCount(ctx); n != 3 || err != nil {
		t.Fatalf("after a's beat and leave: LastCount = %d, %v; want 3", n, err)
	}
	if ttl := client.PTTL(ctx, prefix+"{instances}:last").Val(); ttl <= 0 {
		t.Fatalf("the last count has no expiry: %v", ttl)
	}
	for _, bad := range []string{"0", "-2", "lots", "10001"} {
		client.Set(ctx, prefix+"{instances}:last", bad, time.Minute)
		if n, err := b.LastCount(ctx); n != 0 || err != nil {
			t.Fatalf("kept %q: LastCount = %d, %v; want 0, nil", bad, n, err)
		}
	}
}
