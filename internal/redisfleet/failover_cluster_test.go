package redisfleet

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/redisstore"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// recoverWithin bounds how long after the cluster is healthy again each
// adapter may take to work through the client it already had.
const recoverWithin = 10 * time.Second

// testClusterFailover kills the primary serving the blacklist slot and
// requires the blacklist, the heartbeats and the rule changes to work
// again through the client made by redisstore.Connect before the kill, as
// the limiter's is, within recoverWithin of the cluster being healthy; the
// subscriptions must come back too. Data written before the kill is not
// checked: replication is asynchronous, a failover may lose the last
// writes.
func testClusterFailover(t *testing.T, e *redistest.SharedCluster) {
	client, err := redisstore.Connect(redisstore.ClientConfig{ClusterAddrs: e.Cluster.Addrs(), Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	prefix := redistest.Prefix(t, client)
	bans := NewBlacklist(client, prefix)
	beats := NewHeartbeats(client, prefix, "limiter-1", time.Second)
	rules := NewRuleChanges(client, prefix)
	victim := e.Cluster.PrimaryOf(t, bans.setKey())

	probes := []redistest.Probe{
		{Name: "blacklist add and active", Run: func(ctx context.Context, try string) error {
			ban := banUntil(detectT0, "probe-"+try, time.Hour)
			ban.ExpiresAt = time.Now().Add(time.Hour).Truncate(time.Millisecond).UTC()
			if _, err := bans.Add(ctx, ban); err != nil {
				return err
			}
			active, err := bans.Active(ctx, time.Now())
			if err != nil {
				return err
			}
			for _, b := range active {
				if b.Subject == ban.Subject {
					return nil
				}
			}
			return fmt.Errorf("ban of %s missing from %+v", ban.Subject, active)
		}},
		{Name: "heartbeats", Run: func(ctx context.Context, _ string) error {
			if _, err := beats.Beat(ctx, time.Now()); err != nil {
				return err
			}
			in, err := beats.Instances(ctx, time.Now())
			if err != nil {
				return err
			}
			if len(in) != 1 || in[0].ID != "limiter-1" {
				return fmt.Errorf("instances %+v, want limiter-1 alone", in)
			}
			return nil
		}},
		{Name: "rule changes publish", Run: func(ctx context.Context, _ string) error { return rules.Publish(ctx, 1) }},
	}
	redistest.ProbeBefore(t, probes...)
	banChanges := startSubscription(t, bans.SubscribeResync)
	// A client that only subscribes sends no command whose failure could
	// tell it that the slot map changed, and this one keeps go-redis's
	// default timer (60 s) for reloading it.
	loneChanges := startSubscription(t, NewBlacklist(e.Cluster.Client(t), prefix).SubscribeResync)
	ruleChanges := startSubscription(t, rules.Subscribe)

	replica := e.Cluster.ReplicaOf(t, victim)
	victim.Kill()
	killed := time.Now()
	deadline := e.Cluster.Promoted(t, victim, replica, bans.setKey(), killed, recoverWithin)
	redistest.ProbeAfter(t, killed, deadline, probes...)
	for _, sc := range []struct {
		name string
		sub  *subscription[event.BanChange]
	}{
		{"blacklist subscription", banChanges},
		{"blacklist subscription on a client of its own", loneChanges},
	} {
		t.Run(sc.name, func(t *testing.T) {
			resynced, tries := false, 0
			redistest.Eventually(t, killed, deadline, func(ctx context.Context) error {
				if !resynced {
					select {
					case <-sc.sub.resyncs:
						resynced = true
					case <-ctx.Done():
						return fmt.Errorf("not subscribed again since the kill")
					}
				}
				tries++
				ban := banUntil(detectT0, "sub-"+strconv.Itoa(tries), time.Hour)
				ban.ExpiresAt = time.Now().Add(time.Hour).UTC()
				if _, err := bans.Add(ctx, ban); err != nil {
					return err
				}
				return awaitChange(ctx, sc.sub.changes, func(c event.BanChange) bool { return c.Subject == ban.Subject })
			})
		})
	}
	t.Run("rule changes subscription", func(t *testing.T) {
		version := int64(1000)
		redistest.Eventually(t, killed, deadline, func(ctx context.Context) error {
			version++
			if err := rules.Publish(ctx, version); err != nil {
				return err
			}
			want := version
			return awaitChange(ctx, ruleChanges.changes, func(v int64) bool { return v == want })
		})
	})
}
