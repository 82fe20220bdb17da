package redisstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/testkit/decidetest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// recoverWithin bounds how long after the cluster is healthy again the
// Store may take to work through the client it already had.
const recoverWithin = 10 * time.Second

// testClusterFailover kills a primary (one third of the decision keys),
// whose replica has had its script cache flushed (a node that never saw
// the scripts), and requires decisions to work again through the client
// made by Connect before the kill, within recoverWithin of the cluster
// being healthy. Data written before the kill is not checked: replication
// is asynchronous, a failover may lose the last writes. The fleet's and
// the detector's adapters have failover tests of their own (packages
// redisfleet and redisabuse).
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

	subjects := e.Spread(t, 3, stateKey)
	const down = 0 // subjects[down] is on the victim
	victim := e.Primaries[down]
	// pairs[p] are two calls on primary p, for pipelines of one node.
	var pairs [3][]decide.Call
	for i, s := range e.Spread(t, 6, stateKey) {
		pairs[i%3] = append(pairs[i%3], decide.Call{Keys: decidetest.Keys(prefix+"down:", s), Algorithm: decide.FixedWindow,
			Cost: 1, Limits: []decide.Limit{{Requests: 5, Per: time.Minute}}})
	}

	// decideAll decides a call on fresh keys on every primary.
	decideAll := func(ctx context.Context, try string) error {
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
	}
	probe := redistest.Probe{Name: "decide on every primary", Run: decideAll}
	redistest.ProbeBefore(t, probe)
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
	deadline := e.Cluster.Promoted(t, victim, replica, stateKey(subjects[down]), killed, recoverWithin)
	redistest.ProbeAfter(t, killed, deadline, probe)
	if n := redistest.CommandCalls(t, replica.Client())["eval"]; n == 0 {
		t.Errorf("the promoted replica ran no EVAL: it had no scripts, so how did it decide?")
	}
}
