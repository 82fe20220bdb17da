package redisfleet

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// testClusterHeartbeats: instances beating through different cluster
// clients count each other, list each other's rules, and a leave is seen
// at once (the transactions of Beat, Leave, ReportRules and Instances keep
// to the {instances} slot).
func testClusterHeartbeats(t *testing.T, e *redistest.SharedCluster) {
	ctx := context.Background()
	const interval = time.Second
	clientA, clientB := e.Cluster.Client(t), e.Cluster.Client(t)
	prefix := redistest.Prefix(t, clientA)
	a := NewHeartbeats(clientA, prefix, "a", interval)
	b := NewHeartbeats(clientB, prefix, "b", interval)
	now := time.Now()
	applied := now.Add(-time.Second).UTC().Truncate(time.Millisecond)
	seen := now.UTC().Truncate(time.Millisecond)

	steps := []struct {
		name string
		run  func() (int, error)
		want int
	}{
		{"a alone", func() (int, error) { return a.Beat(ctx, now) }, 1},
		{"b joins through another client", func() (int, error) { return b.Beat(ctx, now) }, 2},
		{"a sees b", func() (int, error) { return a.Beat(ctx, now) }, 2},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			got, err := st.run()
			if err != nil {
				t.Fatal(err)
			}
			if got != st.want {
				t.Fatalf("live = %d, want %d", got, st.want)
			}
		})
	}

	t.Run("rules reported on one client, listed on the other", func(t *testing.T) {
		if err := a.ReportRules(ctx, RulesReport{Version: "7-abc", AppliedAt: applied}); err != nil {
			t.Fatal(err)
		}
		got, err := b.Instances(ctx, now)
		if err != nil {
			t.Fatal(err)
		}
		want := []Instance{{ID: "a", LastSeen: seen, Rules: RulesReport{"7-abc", applied}}, {ID: "b", LastSeen: seen}}
		if !equalInstances(got, want) {
			t.Fatalf("instances:\n got %+v\nwant %+v", got, want)
		}
	})

	t.Run("leave", func(t *testing.T) {
		if err := a.Leave(ctx); err != nil {
			t.Fatal(err)
		}
		got, err := b.Instances(ctx, now)
		if err != nil {
			t.Fatal(err)
		}
		if want := []Instance{{ID: "b", LastSeen: seen}}; !equalInstances(got, want) {
			t.Fatalf("instances after a left:\n got %+v\nwant %+v", got, want)
		}
		if n, err := b.Beat(ctx, now); err != nil || n != 1 {
			t.Fatalf("b's beat after a left: %d, %v; want 1", n, err)
		}
		if ttl := clientA.PTTL(ctx, prefix+"{instances}").Val(); ttl <= 0 {
			t.Errorf("heartbeat set has no expiry: %v", ttl)
		}
	})
}

// testClusterRuleChanges: versions published through one cluster client,
// or on any node directly, reach a subscriber on another client, in order.
func testClusterRuleChanges(t *testing.T, e *redistest.SharedCluster) {
	ctx := context.Background()
	publisherClient := e.Cluster.Client(t)
	prefix := redistest.Prefix(t, publisherClient)
	publisher := NewRuleChanges(publisherClient, prefix)
	subscriber := NewRuleChanges(e.Cluster.Client(t), prefix)
	sub := startSubscription(t, subscriber.Subscribe)

	for v := int64(1); v <= 3; v++ {
		if err := publisher.Publish(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	// PUBLISH carries no key, so each may go to another node and reach the
	// subscriber's node over the cluster bus: the order is not kept across
	// nodes (the Manager only compares the version with its own, so order
	// does not matter), every version must arrive.
	got := []int64{wait(t, sub.changes), wait(t, sub.changes), wait(t, sub.changes)}
	slices.Sort(got)
	if !slices.Equal(got, []int64{1, 2, 3}) {
		t.Errorf("versions %v, want 1, 2 and 3", got)
	}
	for i, n := range e.Cluster.Nodes {
		want := int64(100 + i)
		if err := n.Client().Publish(ctx, publisher.channel, strconv.FormatInt(want, 10)).Err(); err != nil {
			t.Fatalf("publish on %s: %v", n.Addr, err)
		}
		if got := wait(t, sub.changes); got != want {
			t.Errorf("published on %s (%s): version %d, want %d", n.Addr, n.Role(), got, want)
		}
	}
	select {
	case <-sub.resyncs:
		t.Error("the subscription was established again, with no failure")
	default:
	}
}
