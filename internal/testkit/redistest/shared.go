package redistest

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SharedCluster is the cluster a package's cluster test shares among its
// subtests, since each cluster costs seconds to build: three primaries, a
// client, and the primaries as they were at the start, by which Spread
// places keys. Subtests isolate themselves by key prefix; a subtest that
// kills a node comes last.
type SharedCluster struct {
	Cluster   *Cluster
	Client    *redis.ClusterClient
	Primaries []*Node
}

// StartSharedCluster starts a cluster of three primaries with replicas
// replicas each, stopped when tb ends.
func StartSharedCluster(tb testing.TB, replicas int) *SharedCluster {
	tb.Helper()
	c := StartCluster(tb, 3, replicas)
	s := &SharedCluster{Cluster: c, Client: c.Client(tb), Primaries: c.Primaries()}
	if len(s.Primaries) != 3 {
		tb.Fatalf("%d primaries, want 3", len(s.Primaries))
	}
	return s
}

// Spread returns n subjects, the i-th chosen so that key(subject) is served
// by primary i mod 3: keys built from them cover every primary.
func (s *SharedCluster) Spread(tb testing.TB, n int, key func(subject string) string) []string {
	tb.Helper()
	subjects := make([]string, 0, n)
	candidate := 0
	for i := range n {
		want := s.Primaries[i%len(s.Primaries)]
		for {
			if candidate > 100*(n+1) {
				tb.Fatalf("no subject among %d candidates lands on %s", candidate, want.Addr)
			}
			subject := "s" + strconv.Itoa(candidate)
			candidate++
			if s.Cluster.PrimaryOf(tb, key(subject)) == want {
				subjects = append(subjects, subject)
				break
			}
		}
	}
	return subjects
}

// RequireSpread fails unless keys are served by all three primaries, as
// the live nodes see it: the premise of every cluster subtest.
func (s *SharedCluster) RequireSpread(tb testing.TB, keys []string) {
	tb.Helper()
	var served []string
	for _, k := range keys {
		if addr := s.Cluster.PrimaryOf(tb, k).Addr; !slices.Contains(served, addr) {
			served = append(served, addr)
		}
	}
	if len(served) != 3 {
		tb.Fatalf("keys %q are served by %d primaries (%v), want 3", keys, len(served), served)
	}
}

// PrimaryIndex returns the index in s.Primaries of the primary serving key.
func (s *SharedCluster) PrimaryIndex(tb testing.TB, key string) int {
	tb.Helper()
	i := slices.Index(s.Primaries, s.Cluster.PrimaryOf(tb, key))
	if i < 0 {
		tb.Fatalf("key %q is served by a node that was not a primary at the start", key)
	}
	return i
}

// EvalCounts returns how many EVAL commands each primary has run: where a
// server lacked a script, a caller falls back to EVAL.
func (s *SharedCluster) EvalCounts(tb testing.TB) [3]int {
	tb.Helper()
	var n [3]int
	for i, p := range s.Primaries {
		n[i] = CommandCalls(tb, p.Client())["eval"]
	}
	return n
}

// Eventually runs try (each run bounded by a second) until it succeeds,
// and fails the test with the last error when deadline passes first;
// killed is when the failure began, for the log.
func Eventually(t *testing.T, killed, deadline time.Time, try func(ctx context.Context) error) {
	t.Helper()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := try(ctx)
		cancel()
		if err == nil {
			t.Logf("works %v after the kill", time.Since(killed).Round(time.Millisecond))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still failing %v after the kill: %v", time.Since(killed).Round(time.Millisecond), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Probe is an operation a failover test requires to work before a primary
// is killed and again once its replica has taken over; try names the
// attempt, for keys of its own.
type Probe struct {
	Name string
	Run  func(ctx context.Context, try string) error
}

// ProbeBefore runs each probe once, within a second, and fails the test on
// an error: the premise of a failover test.
func ProbeBefore(t *testing.T, probes ...Probe) {
	t.Helper()
	for _, p := range probes {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := p.Run(ctx, "before")
		cancel()
		if err != nil {
			t.Fatalf("%s before the failover: %v", p.Name, err)
		}
	}
}

// Promoted waits, victim having been killed at killed, until the cluster is
// healthy with replica serving key, logs how long that took, and returns
// the deadline of the recovery: recoverWithin after the cluster became
// healthy.
func (c *Cluster) Promoted(t *testing.T, victim, replica *Node, key string, killed time.Time, recoverWithin time.Duration) time.Time {
	t.Helper()
	c.WaitHealthy(t, 15*time.Second)
	healthy := time.Now()
	if p := c.PrimaryOf(t, key); p != replica {
		t.Fatalf("%s served by %s after the failover, want the replica %s", key, p.Addr, replica.Addr)
	}
	t.Logf("killed primary %s; replica %s promoted and cluster healthy after %v",
		victim.Addr, replica.Addr, healthy.Sub(killed).Round(time.Millisecond))
	return healthy.Add(recoverWithin)
}

// ProbeAfter runs each probe as a subtest until it works again (a fresh
// try each time), failing it when deadline passes first (Eventually).
func ProbeAfter(t *testing.T, killed, deadline time.Time, probes ...Probe) {
	t.Helper()
	for _, p := range probes {
		t.Run(p.Name, func(t *testing.T) {
			tries := 0
			Eventually(t, killed, deadline, func(ctx context.Context) error {
				tries++
				return p.Run(ctx, "after"+strconv.Itoa(tries))
			})
		})
	}
}
