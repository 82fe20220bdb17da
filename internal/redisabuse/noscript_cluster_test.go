package redisabuse

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/abuse"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/testkit/abusetest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// testClusterNoScript: every node has its own script cache. After SCRIPT
// FLUSH on one primary, only the calls of the windows and the ledger on
// that primary fall back to EVAL, the calls of one pipeline across
// primaries included.
func testClusterNoScript(t *testing.T, e *redistest.SharedCluster) {
	ctx := context.Background()
	prefix := redistest.Prefix(t, e.Client)
	victim := e.Primaries[0]
	ips := e.Spread(t, 3, func(s string) string {
		return offenderTag("", abuse.Offender{Scope: event.ScopeIP, Subject: s}) + ":v"
	})
	w, l := NewWindows(e.Client, prefix), NewLedger(e.Client, prefix, nil)
	mem := abusetest.NewMemoryWindows()
	// record sends, in one pipeline, a sighting of each offender and its
	// redelivery, then claims a ban of ips[0], on the victim.
	record := func(t *testing.T, round int) {
		t.Helper()
		var sightings []abuse.Sighting
		for i, ip := range ips {
			s := sight(fmt.Sprintf("e%d-%s", round, ip), time.Duration(round*10+i)*time.Second, "/a", true)
			s.Offender.Subject = ip
			sightings = append(sightings, s, s)
		}
		got, err := w.Record(ctx, testSpec, sightings)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := mem.Record(ctx, testSpec, sightings)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("round %d: tallies\n got %+v\nwant %+v", round, got, want)
		}
		c := claimAt(detectT0, event.ActionBan, ips[0], "scan", time.Duration(round)*24*time.Hour)
		if out, err := l.Claim(ctx, c); err != nil || !out.Publish {
			t.Errorf("round %d: claim on the victim: %+v, %v; want a new ban", round, out, err)
		}
	}
	record(t, 0) // caches both scripts where they are missing
	if err := victim.Client().ScriptFlush(ctx).Err(); err != nil {
		t.Fatalf("script flush on %s: %v", victim.Addr, err)
	}
	before := e.EvalCounts(t)
	record(t, 1)
	after := e.EvalCounts(t)
	// Two sightings and the claim on the victim; none elsewhere.
	if got, want := [3]int{after[0] - before[0], after[1] - before[1], after[2] - before[2]}, [3]int{3, 0, 0}; got != want {
		t.Errorf("EVAL ran %v times per primary, want %v", got, want)
	}
}
