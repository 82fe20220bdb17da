package redisfleet

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/redisabuse"
	"github.com/ratewarden/ratewarden/internal/testkit/abusetest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// subscription is a subscribe call running on a goroutine of its own,
// delivering changes and resyncs on channels.
type subscription[T any] struct {
	changes chan T
	resyncs chan struct{}
}

// startSubscription runs subscribe until tb ends, then requires that it
// returned nil, and waits for the first resync (subscribed).
func startSubscription[T any](tb testing.TB, subscribe func(ctx context.Context, onChange func(T), onResync func()) error) *subscription[T] {
	tb.Helper()
	s := &subscription[T]{changes: make(chan T, 100), resyncs: make(chan struct{}, 100)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- subscribe(ctx, func(c T) { s.changes <- c }, func() { s.resyncs <- struct{}{} })
	}()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("subscribe returned %v", err)
		}
	})
	wait(tb, s.resyncs)
	return s
}

// testClusterBlacklist: bans written through one cluster client are read
// and announced to a subscriber on another; messages published on any node
// reach the subscriber (the cluster bus forwards them); the optimistic
// transaction of Add holds under contention from two clients; Remove
// forgets ledger records whose keys live on other primaries.
func testClusterBlacklist(t *testing.T, e *redistest.SharedCluster) {
	ctx := context.Background()
	writerClient, readerClient := e.Cluster.Client(t), e.Cluster.Client(t)
	prefix := redistest.Prefix(t, writerClient)
	writer, reader := NewBlacklist(writerClient, prefix), NewBlacklist(readerClient, prefix)
	writer.now = func() time.Time { return detectT0 }
	reader.now = writer.now
	sub := startSubscription(t, reader.SubscribeResync)

	// Subjects whose ledger records (deleted by Remove) sit on every primary.
	subjects := e.Spread(t, 3, func(s string) string { return redisabuse.BanRecordKey("", event.ScopeUser, s) })

	t.Run("add is read and announced through another client", func(t *testing.T) {
		var want []event.Ban
		for i, s := range subjects {
			ban := banUntil(detectT0, s, time.Duration(i+1)*time.Hour)
			if _, err := writer.Add(ctx, ban); err != nil {
				t.Fatal(err)
			}
			want = append(want, ban)
			if got := wait(t, sub.changes); got != (event.BanChange{Action: "ban", Scope: "user", Subject: s, ExpiresAt: ban.ExpiresAt}) {
				t.Errorf("change %+v after banning %s", got, s)
			}
		}
		active, err := reader.Active(ctx, detectT0)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(active, want) {
			t.Errorf("active\n got %+v\nwant %+v", active, want)
		}
	})

	t.Run("published on any node reaches the subscriber", func(t *testing.T) {
		for i, n := range e.Cluster.Nodes {
			subject := "node-" + strconv.Itoa(i)
			msg := "ban|ip|" + strconv.FormatInt(detectT0.UnixMilli(), 10) + "|" + subject
			if err := n.Client().Publish(ctx, reader.channel(), msg).Err(); err != nil {
				t.Fatalf("publish on %s: %v", n.Addr, err)
			}
			want := event.BanChange{Action: "ban", Scope: "ip", Subject: subject, ExpiresAt: detectT0}
			if got := wait(t, sub.changes); got != want {
				t.Errorf("published on %s (%s): got %+v, want %+v", n.Addr, n.Role(), got, want)
			}
		}
	})

	t.Run("remove forgets ledger records on every primary", func(t *testing.T) {
		// The ledger's clock is the wall clock, with which detectT0 (now)
		// is in step: Settle enforces the hour-long bans.
		l := redisabuse.NewLedger(writerClient, prefix, writer)
		// Subjects not banned yet: a ban never shortens a longer one.
		fresh := e.Spread(t, 3, func(s string) string {
			return redisabuse.BanRecordKey("", event.ScopeUser, "r"+s)
		})
		for i := range fresh {
			fresh[i] = "r" + fresh[i]
		}
		for _, s := range fresh {
			c := banClaim(event.ScopeUser, s, detectT0)
			out := abusetest.Claim(t, l, c)
			if !out.Publish {
				t.Fatalf("claim of %s: %+v, want a new ban", s, out)
			}
			abusetest.Settle(t, l, out.Ban, true)
			if got, want := wait(t, sub.changes), (event.BanChange{Action: "ban", Scope: "user", Subject: s, ExpiresAt: out.Ban.ExpiresAt}); got != want {
				t.Errorf("change %+v, want %+v", got, want)
			}
			removed, err := writer.Remove(ctx, event.ScopeUser, s)
			if err != nil || !removed {
				t.Fatalf("remove %s: %v, %v; want removed", s, removed, err)
			}
			if got, want := wait(t, sub.changes), (event.BanChange{Action: "unban", Scope: "user", Subject: s}); got != want {
				t.Errorf("change %+v, want %+v", got, want)
			}
			if out := abusetest.Claim(t, l, banClaim(event.ScopeUser, s, detectT0.Add(time.Minute))); !out.Publish || out.Ban.DurationS != 7200 {
				t.Errorf("claim of %s after the unban: %+v, want a new ban, escalated", s, out)
			}
		}
		if active, err := reader.Active(ctx, detectT0); err != nil || len(active) != len(subjects) {
			t.Errorf("active after removing them: %+v, %v; want the %d bans of the first subtest", active, err, len(subjects))
		}
		for _, s := range subjects {
			if removed, err := writer.Remove(ctx, event.ScopeUser, s); err != nil || !removed {
				t.Fatalf("remove %s: %v, %v", s, removed, err)
			}
			wait(t, sub.changes)
		}
		if removed, err := writer.Remove(ctx, event.ScopeUser, subjects[0]); err != nil || removed {
			t.Errorf("second remove: %v, %v; want false", removed, err)
		}
	})

	t.Run("concurrent adds from two clients", func(t *testing.T) {
		const each = 20
		var wg sync.WaitGroup
		errs := make(chan error, 2*each)
		for w, bl := range []*Blacklist{writer, reader} {
			wg.Go(func() {
				for i := range each {
					if _, err := bl.Add(ctx, banUntil(detectT0, fmt.Sprintf("c%d-%d", w, i), time.Hour)); err != nil {
						errs <- err
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		active, err := reader.Active(ctx, detectT0)
		if err != nil || len(active) != 2*each {
			t.Errorf("active: %d bans, %v; want %d", len(active), err, 2*each)
		}
	})

	t.Run("add drops expired entries", func(t *testing.T) {
		writer.now = func() time.Time { return detectT0.Add(2 * time.Hour) }
		if _, err := writer.Add(ctx, banUntil(detectT0, "late", 3*time.Hour)); err != nil {
			t.Fatal(err)
		}
		members, err := readerClient.ZRange(ctx, writer.setKey(), 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		fields, err := readerClient.HKeys(ctx, writer.detailsKey()).Result()
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"user|late"}; !reflect.DeepEqual(members, want) || !reflect.DeepEqual(fields, want) {
			t.Errorf("set %q, details %q; want %q", members, fields, want)
		}
		redistest.RequireExpiry(t, e.Client, prefix)
	})
}
