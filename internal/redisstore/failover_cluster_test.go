package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/decide/decidetest"
	"github.com/ratewarden/ratewarden/internal/detect"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/redistest"
)

// recoverWithin bounds how long after the cluster is healthy again each
// component may take to work through the client it already had.
const recoverWithin = 10 * time.Second

// testClusterFailover kills the primary serving the blacklist slot (and one
// third of the decision and detector keys), whose replica has had its
// script cache flushed (a node that never saw the scripts), and requires
// every component to work again through the client made by Connect before
// the kill, within recoverWithin of the cluster being healthy; the
// subscriptions must come back too. Data written before the kill is not
// checked: replication is asynchronous, a failover may lose the last writes.
func testClusterFailover(t *testing.T, e *redistest.SharedCluster) {
	ctx := context.Background()
	client, err := Connect(ClientConfig{ClusterAddrs: e.Cluster.Addrs(), Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	prefix := redistest.Prefix(t, client)
	store := New(client)
	if err := store.Load(ctx); err != nil {
		t.Fatal(err)
	}
	bans := NewBlacklist(client, prefix)
	beats := NewHeartbeats(client, prefix, "limiter-1", time.Second)
	rules := NewRuleChanges(client, prefix)
	windows := NewWindows(client, prefix)
	ledger := NewLedger(client, prefix, bans)

	victim := e.Cluster.PrimaryOf(t, bans.setKey())
	subjects := e.Spread(t, 3, stateKey)
	offenders := spreadOffenders(t, e, 3, event.ScopeIP)
	down := e.PrimaryIndex(t, bans.setKey())
	// pairs[p] are two calls on primary p, for pipelines of one node.
	var pairs [3][]decide.Call
	for i, s := range e.Spread(t, 6, stateKey) {
		pairs[i%3] = append(pairs[i%3], decide.Call{Keys: decidetest.Keys(prefix+"down:", s), Algorithm: decide.FixedWindow,
			Cost: 1, Limits: []decide.Limit{{Requests: 5, Per: time.Minute}}})
	}
	victimOffender := offenders[down] // offender i is on primary i

	probes := []struct {
		name string
		run  func(ctx context.Context, try string) error
	}{
		{"decide on every primary", func(ctx context.Context, try string) error {
			calls := make([]decide.Call, len(subjects))
			for i, s := range subjects {
				// The try varies the key outside the hash tag: same slot.
				calls[i] = decide.Call{Keys: decidetest.Keys(prefix+try+":", s), Algorithm: decide.SlidingWindow, Cost: 1,
					Limits: []decide.Limit{{Requests: 5, Per: time.Minute}}}
			}
			got, err := store.Decide(ctx, calls)
			if err != nil {
				return err
			}
			for i, r := range got {
				if !r.Allowed || r.Remaining != 4 {
					return fmt.Errorf("call %d on fresh keys: %+v", i, r)
				}
			}
			return nil
		}},
		{"blacklist add and active", func(ctx context.Context, try string) error {
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
		{"heartbeats", func(ctx context.Context, _ string) error {
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
		{"rule changes publish", func(ctx context.Context, _ string) error { return rules.Publish(ctx, 1) }},
		{"windows on every primary", func(ctx context.Context, try string) error {
			sightings := make([]detect.Sighting, len(offenders))
			for i, o := range offenders {
				sightings[i] = detect.Sighting{Offender: o, EventID: try, TS: time.Now(), Endpoint: "/a", Violation: true}
			}
			_, err := windows.Record(ctx, testSpec, sightings)
			return err
		}},
		{"ledger claim and settle", func(ctx context.Context, try string) error {
			c := claimAt(detectT0, event.ActionBan, victimOffender.Subject, "scan", 0)
			c.Ban.BanID, c.Ban.TS = "probe-"+try, time.Now().UTC()
			out, err := ledger.Claim(ctx, c)
			if err != nil {
				return err
			}
			return ledger.Settle(ctx, out.Ban, false)
		}},
	}
	for _, p := range probes {
		probeCtx, cancel := context.WithTimeout(ctx, time.Second)
		err := p.run(probeCtx, "before")
		cancel()
		if err != nil {
			t.Fatalf("%s before the failover: %v", p.name, err)
		}
	}
	banChanges := startSubscription(t, bans.SubscribeResync)
	// A client that only subscribes sends no command whose failure could
	// tell it that the slot map changed, and this one keeps go-redis's
	// default timer (60 s) for reloading it.
	loneChanges := startSubscription(t, NewBlacklist(e.Cluster.Client(t), prefix).SubscribeResync)
	ruleChanges := startSubscription(t, rules.Subscribe)

	replica := e.Cluster.ReplicaOf(t, victim)
	if err := replica.Client().ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	victim.Kill()
	killed := time.Now()
	t.Run("while the primary is down the others decide", func(t *testing.T) {
		// Before the replica can take over (NodeTimeout, then an election),
		// each primary's calls in a pipeline of their own, the dead one's
		// first: it fails with a node failure within its deadline, the live
		// ones answer. (A pipeline mixing nodes does not: go-redis holds
		// every reply back while it retries the dead node, and sets the
		// error of a deadline that passes first on all of them.)
		for _, p := range []int{down, (down + 1) % 3, (down + 2) % 3} {
			calls := []decide.Call{pairs[p][0], pairs[p][1]}
			results := make([]decide.Result, len(calls))
			ctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			errs := store.run(ctx, new(nodeClock), nil, calls, results) // a clock of its own: sampled first
			cancel()
			for i := range calls {
				var err error
				if errs != nil {
					err = errs[i]
				}
				switch {
				case p == down && !nodeDown(err):
					t.Errorf("call %d on the dead primary: %v (class %q), want a connection or timeout error", i, err, ClassifyError(err))
				case p != down && err != nil:
					t.Errorf("call %d on live primary %d: %v", i, p, err)
				case p != down && (!results[i].Allowed || results[i].Remaining != 4):
					t.Errorf("call %d on live primary %d: %+v, want admitted with 4 left", i, p, results[i])
				}
			}
		}
	})
	e.Cluster.WaitHealthy(t, 15*time.Second)
	healthy := time.Now()
	if p := e.Cluster.PrimaryOf(t, bans.setKey()); p != replica {
		t.Fatalf("blacklist slot served by %s after the failover, want the replica %s", p.Addr, replica.Addr)
	}
	t.Logf("killed primary %s; replica %s promoted and cluster healthy after %v",
		victim.Addr, replica.Addr, healthy.Sub(killed).Round(time.Millisecond))
	deadline := healthy.Add(recoverWithin)

	for _, p := range probes {
		t.Run(p.name, func(t *testing.T) {
			tries := 0
			redistest.Eventually(t, killed, deadline, func(ctx context.Context) error {
				tries++
				return p.run(ctx, "after"+strconv.Itoa(tries))
			})
		})
	}
	if n := redistest.CommandCalls(t, replica.Client())["eval"]; n == 0 {
		t.Errorf("the promoted replica ran no EVAL: it had no scripts, so how did it decide?")
	}
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
