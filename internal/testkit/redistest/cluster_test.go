package redistest_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// The harness builds three primaries with a replica each, and a killed
// primary's replica takes its slots over.
func TestClusterFailover(t *testing.T) {
	c := redistest.StartCluster(t, 3, 1)
	primaries := c.Primaries()
	if len(primaries) != 3 {
		t.Fatalf("%d primaries, want 3", len(primaries))
	}
	client := c.Client(t)
	ctx := context.Background()
	if err := client.Set(ctx, "{k}", "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	c.WaitReplicated(t, 10*time.Second)
	old := c.PrimaryOf(t, "{k}")
	old.Kill()
	start := time.Now()
	c.WaitHealthy(t, 15*time.Second)
	promoted := c.PrimaryOf(t, "{k}")
	if promoted == old || !slices.Contains(c.Primaries(), promoted) {
		t.Fatalf("slot of {k} served by %s after killing %s", promoted.Addr, old.Addr)
	}
	t.Logf("failover took %v", time.Since(start).Round(time.Millisecond))
	if v, err := promoted.Client().Get(ctx, "{k}").Result(); err != nil || v != "v" {
		t.Fatalf("promoted replica has {k} = %q, %v; want the replicated value", v, err)
	}
}
