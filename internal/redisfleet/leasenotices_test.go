package redisfleet

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// TestLeaseNotices: keys published through one client reach a subscriber
// on another, in order, and Subscribe returns when its context ends.
func TestLeaseNotices(t *testing.T) {
	client := redistest.Client(t)
	prefix := redistest.Prefix(t, client)
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan string, 64)
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := NewLeaseNotices(redistest.Client(t), prefix).Subscribe(ctx, func(k string) { got <- k }); err != nil {
			t.Error(err)
		}
	})
	pub := NewLeaseNotices(client, prefix)
	keys := []string{prefix + "{tokens|api_key=k1}:fw", prefix + "{tokens|api_key=k2}:fw"}
	tick := time.NewTicker(10 * time.Millisecond) // until the subscription is up
	defer tick.Stop()
	for done := false; !done; {
		if err := pub.Publish(ctx, keys); err != nil {
			t.Fatal(err)
		}
		select {
		case k := <-got: // the subscription may have started between the two
			if done = k == keys[0]; done && wait(t, got) != keys[1] {
				t.Fatalf("received %q, then not %q", k, keys[1])
			}
		case <-tick.C:
		}
	}
	cancel()
	wg.Wait()
}
