package redisabuse

import (
	"context"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/abuse"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/redisstore"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// recoverWithin bounds how long after the cluster is healthy again the
// windows and the ledger may take to work through the client they already
// had.
const recoverWithin = 10 * time.Second

// testClusterFailover kills a primary (one third of the offenders' keys),
// whose replica has had its script cache flushed (a node that never saw
// the scripts), and requires the windows and the ledger to work again
// through the client made by redisstore.Connect before the kill, as the
// detector's is, within recoverWithin of the cluster being healthy. Data
// written before the kill is not checked: replication is asynchronous, a
// failover may lose the last writes.
func testClusterFailover(t *testing.T, e *redistest.SharedCluster) {
	ctx := context.Background()
	client, err := redisstore.Connect(redisstore.ClientConfig{ClusterAddrs: e.Cluster.Addrs(), Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	prefix := redistest.Prefix(t, client)
	windows := NewWindows(client, prefix)
	ledger := NewLedger(client, prefix, nil)

	offenders := spreadOffenders(t, e, 3, event.ScopeIP)
	const down = 0 // offender i is on primary i
	victim := e.Primaries[down]

	probes := []redistest.Probe{
		{Name: "windows on every primary", Run: func(ctx context.Context, try string) error {
			sightings := make([]abuse.Sighting, len(offenders))
			for i, o := range offenders {
				sightings[i] = abuse.Sighting{Offender: o, EventID: try, TS: time.Now(), Endpoint: "/a", Violation: true}
			}
			_, err := windows.Record(ctx, testSpec, sightings)
			return err
		}},
		{Name: "ledger claim and settle", Run: func(ctx context.Context, try string) error {
			c := claimAt(detectT0, event.ActionBan, offenders[down].Subject, "scan", 0)
			c.Ban.BanID, c.Ban.TS = "probe-"+try, time.Now().UTC()
			out, err := ledger.Claim(ctx, c)
			if err != nil {
				return err
			}
			return ledger.Settle(ctx, out.Ban, false)
		}},
	}
	redistest.ProbeBefore(t, probes...)

	replica := e.Cluster.ReplicaOf(t, victim)
	if err := replica.Client().ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	victim.Kill()
	killed := time.Now()
	deadline := e.Cluster.Promoted(t, victim, replica, BanRecordKey(prefix, event.ScopeIP, offenders[down].Subject), killed, recoverWithin)
	redistest.ProbeAfter(t, killed, deadline, probes...)
	if n := redistest.CommandCalls(t, replica.Client())["eval"]; n == 0 {
		t.Errorf("the promoted replica ran no EVAL: it had no scripts, so how did it record?")
	}
}
