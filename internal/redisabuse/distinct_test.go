package redisabuse

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/abuse"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/testkit/abusetest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// distinctSpecs are the specs of the differential tests: a small cap so
// eviction happens, with and without every member on crossing.
var distinctSpecs = map[string]abuse.DistinctSpec{
	"users":   {Window: 3 * time.Second, Grace: time.Second, Cap: 4, Threshold: 3, Samples: 2},
	"sources": {Window: 5 * time.Second, Grace: time.Second, Cap: 6, Threshold: 5, Samples: 3, AllOnCross: true},
}

// distinctDifferential adds random batches to d and to the memory
// reference and expects the same counts: several sets, members drawn from
// a small pool (repeats), members that are events (their own or others),
// the "sources" sets' members in groups (mostly one per member, now and
// then another), trusts of members, times moving forward, back and
// jumping, ties, redelivered adds, and reloads that lower or raise a
// set's threshold (and its cap with it) under or over its count.
func distinctDifferential(t *testing.T, d abuse.Distinct, offenders []abuse.Offender, rng *rand.Rand, batches, maxBatch int) {
	t.Helper()
	mem := abusetest.NewMemoryDistinct()
	at := time.Duration(0)
	var seen []abuse.DistinctAdd
	names := []string{"users", "sources"}
	specs := map[string]abuse.DistinctSpec{"users": distinctSpecs["users"], "sources": distinctSpecs["sources"]}
	for batch := range batches {
		if rng.IntN(4) == 0 { // a reload
			name := names[rng.IntN(len(names))]
			s := specs[name]
			s.Threshold = 1 + rng.Int64N(6)
			s.Cap = s.Threshold + 1
			specs[name] = s
		}
		var adds []abuse.DistinctAdd
		for range 1 + rng.IntN(maxBatch) {
			if len(seen) > 0 && rng.IntN(6) == 0 { // redelivery
				adds = append(adds, seen[rng.IntN(len(seen))])
				continue
			}
			switch r := rng.IntN(20); {
			case r == 0:
				at += 8 * time.Second
			case r < 3:
				at -= time.Duration(rng.IntN(2000)) * time.Millisecond
			case r < 6: // same ms: ties
			default:
				at += time.Duration(rng.IntN(300)) * time.Millisecond
			}
			name := names[rng.IntN(len(names))]
			id := fmt.Sprintf("e%d", len(seen))
			a := abuse.DistinctAdd{
				Set:    abuse.DistinctSet{Offender: offenders[rng.IntN(len(offenders))], Name: name},
				Spec:   specs[name],
				Member: fmt.Sprintf("m%d", rng.IntN(12)), EventID: id, TS: detectT0.Add(at),
			}
			switch rng.IntN(6) {
			case 0: // the event is its member (brute force counts events)
				a.Member = id
			case 1: // a member named as another event
				a.Member = fmt.Sprintf("e%d", rng.IntN(len(seen)+1))
			case 2: // a success of the member: trusted
				a.Trust = true
			}
			if name == "sources" {
				a.Group = fmt.Sprintf("g%d", len(a.Member)%2*4+int(a.Member[len(a.Member)-1])%4)
				if rng.IntN(10) == 0 {
					a.Group = fmt.Sprintf("g%d", rng.IntN(8))
				}
			}
			seen = append(seen, a)
			adds = append(adds, a)
		}
		got := addDistinct(t, d, adds...)
		want, err := mem.Add(context.Background(), adds)
		if err != nil {
			t.Fatal(err)
		}
		for i := range got {
			if !reflect.DeepEqual(got[i], want[i]) {
				t.Fatalf("batch %d add %d %+v:\n redis %+v\nmemory %+v", batch, i, adds[i], got[i], want[i])
			}
		}
	}
}

func addDistinct(tb testing.TB, d abuse.Distinct, adds ...abuse.DistinctAdd) []abuse.DistinctCount {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := d.Add(ctx, adds)
	if err != nil {
		tb.Fatalf("add: %v", err)
	}
	return out
}

// The Redis sets answer as the memory reference on the same random
// sequences, and every key they write expires.
func TestDistinctDifferential(t *testing.T) {
	client := redistest.Client(t)
	prefix := redistest.Prefix(t, client)
	offenders := []abuse.Offender{
		{Scope: event.ScopeIP, Subject: "203.0.113.7"}, {Scope: event.ScopeIP, Subject: "2001:db8:1:2::/64"},
		{Scope: event.ScopeUser, Subject: "u-42"},
	}
	for seed := range uint64(3) {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) {
			p := fmt.Sprintf("%ss%d:", prefix, seed)
			d := NewDistinct(client, p)
			if seed == 2 {
				d.perCall = 3 // a set's adds spread over several calls
			}
			distinctDifferential(t, d, offenders, rand.New(rand.NewPCG(seed, 17)), 40, 25)
		})
	}
	if n := redistest.RequireExpiry(t, client, prefix); n == 0 {
		t.Errorf("no key written under %s", prefix)
	}
}

// TestDistinctShared runs the scenario table shared with
// abusetest.MemoryDistinct: crossings when a reload changes a threshold.
func TestDistinctShared(t *testing.T) {
	client := redistest.Client(t)
	prefix := redistest.Prefix(t, client)
	n := 0
	abusetest.RunDistinct(t, func(t *testing.T) abuse.Distinct {
		n++
		return NewDistinct(client, fmt.Sprintf("%sc%d:", prefix, n))
	})
}

// A crossing answers every member, the members that come after answer
// themselves, a redelivery of the crossing answers every member again, and
// a member seen again by another event is not introduced.
func TestDistinctCrossing(t *testing.T) {
	client := redistest.Client(t)
	d := NewDistinct(client, redistest.Prefix(t, client))
	spec := abuse.DistinctSpec{Window: time.Minute, Grace: time.Second, Cap: 3, Threshold: 2, Samples: 1, AllOnCross: true}
	set := abuse.DistinctSet{Offender: abuse.Offender{Scope: event.ScopeUser, Subject: "u-42"}, Name: "account_attack"}
	add := func(id, member string, ms int64) abuse.DistinctAdd {
		return abuse.DistinctAdd{Set: set, Spec: spec, Member: member, EventID: id, TS: detectT0.Add(time.Duration(ms) * time.Millisecond)}
	}
	batch := []abuse.DistinctAdd{add("e1", "a", 1), add("e2", "b", 2), add("e3", "a", 3), add("e4", "c", 4), add("e5", "d", 5)}
	for round := range 2 { // the second is a redelivery of the whole batch
		got := addDistinct(t, d, batch...)
		check := func(i int, count int64, introduced, crossed bool, members []string) {
			t.Helper()
			c := got[i]
			if c.Count != count || c.Introduced != introduced || c.Crossed != crossed || !reflect.DeepEqual(c.Members, members) {
				t.Errorf("round %d add %d: %+v, want count %d introduced %v crossed %v members %q", round, i, c, count, introduced, crossed, members)
			}
		}
		if round == 0 {
			check(0, 1, true, false, nil)
			check(1, 2, true, false, nil)
			check(2, 2, false, false, nil)
			check(3, 3, true, true, []string{"c", "a", "b"})
		} else {
			// The state already holds the whole batch: b was pushed out by
			// d (least recently seen), so e2 introduces it again.
			check(0, 3, true, false, []string{"d"})
			check(1, 3, true, false, []string{"d"})
			check(2, 3, false, false, []string{"d"})
			check(3, 3, true, true, []string{"d", "c", "a"})
		}
		check(4, 3, true, false, []string{"d"})
	}
}

// Grouped sets count groups: eleven members of one group are a count of 1,
// and a crossing lists every member kept; a trusted member is answered
// apart (Spared, Trusted) while its trust is within the window, and the
// trusted members kept are bounded by the cap.
func TestDistinctGroupsAndTrust(t *testing.T) {
	client := redistest.Client(t)
	prefix := redistest.Prefix(t, client)
	d := NewDistinct(client, prefix)
	spec := abuse.DistinctSpec{Window: time.Minute, Grace: time.Second, Cap: 4, Threshold: 3, Samples: 1, AllOnCross: true}
	set := abuse.DistinctSet{Offender: abuse.Offender{Scope: event.ScopeUser, Subject: "victim"}, Name: "account_attack"}
	n := 0
	add := func(member, group string, ms int64, trust bool) abuse.DistinctCount {
		t.Helper()
		n++
		a := abuse.DistinctAdd{Set: set, Spec: spec, Member: member, Group: group, Trust: trust, EventID: fmt.Sprint("e", n),
			TS: detectT0.Add(time.Duration(ms) * time.Millisecond)}
		return addDistinct(t, d, a)[0]
	}
	for i := range 11 {
		if c := add(fmt.Sprintf("2001:db8:1:%x::/64", 0x100+i), "2001:db8:1::/48", int64(i), false); c.Count != 1 || !c.Introduced {
			t.Fatalf("/64 %d of one /48: %+v, want a count of 1", i, c)
		}
	}
	if c := add("owner", "", -70_000, true); !reflect.DeepEqual(c, abuse.DistinctCount{}) {
		t.Fatalf("trust: %+v, want the zero count", c)
	}
	add("owner", "", 20, true)
	add("old", "", 21, true) // trusted, never sighted: never listed
	for i, g := range []string{"owner", "a", "b"} {
		c := add(g, g, int64(30+i), false)
		if i < 2 && c.Count != int64(2+i) {
			t.Fatalf("network %d: count %d", i+2, c.Count)
		}
		if i == 2 {
			want := abuse.DistinctCount{Count: 4, Introduced: true, Crossed: true, Members: []string{"b", "a", "2001:db8:1:10a::/64"},
				Spared: []string{"owner"}, Newest: detectT0.Add(32 * time.Millisecond), First: detectT0.Add(10 * time.Millisecond), Last: detectT0.Add(32 * time.Millisecond)}
			if !reflect.DeepEqual(c, want) {
				t.Fatalf("crossing:\n got %+v\nwant %+v", c, want)
			}
		}
	}
	if c := add("owner", "owner", 40, false); !c.Trusted || c.Introduced {
		t.Errorf("owner again: %+v, want trusted", c)
	}
	if c := add("late", "late", 120_000, false); c.Trusted || len(c.Spared) != 0 {
		t.Errorf("a minute later, the owner's trust has lapsed: %+v", c)
	}
	for i := range 10 {
		add(fmt.Sprint("t", i), "", int64(200_000+i), true)
	}
	if got := client.ZCard(context.Background(), offenderTag(prefix, set.Offender)+":d:account_attack:t").Val(); got != spec.Cap {
		t.Errorf("%d trusted members kept, want the cap %d", got, spec.Cap)
	}
}
