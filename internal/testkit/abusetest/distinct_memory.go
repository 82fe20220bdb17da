package abusetest

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/ratewarden/ratewarden/internal/abuse"
)

// MemoryDistinct is the in-memory abuse.Distinct: the reference the Redis
// implementation is tested against, and the state of replay tests. Times
// are truncated to milliseconds. Per set, on each add:
//   - Newest becomes the larger of itself and the add's time (the add's
//     time when the set has no member yet);
//   - members, and groups, seen before Newest-Window are dropped;
//   - a member already kept moves forward to the add's time when later;
//     Introduced when the event that brought it in is this one;
//   - when the count (before this add's sighting) is Threshold or less,
//     the set forgets its crossing;
//   - a new member within the window is added with this event as its
//     introducer (Introduced), then, over Cap, the least recently seen
//     member (by time, then member) is dropped, possibly itself; Crossed
//     when the count is over Threshold and the set has no crossing (it
//     went from Threshold or less to more, or a lowered Threshold finds it
//     over), and the set remembers this event as its crossing;
//   - with a Group, a sighting within the window (of a new member, or of a
//     kept one) moves its group forward to the add's time, or adds it,
//     then, if it added it and is over Cap, drops the least recently seen
//     group (by time, then group); the count is the groups';
//   - but a new member that finds the set already over Threshold and
//     without a crossing (a reload lowered Threshold, and Cap with it)
//     drops no member and no group: its crossing answers every member the
//     set holds, none pushed out by the crossing itself;
//   - a kept member introduced by this event whose crossing it was is
//     Crossed again (a redelivery);
//   - the count, bounds and members follow abuse.DistinctCount, the
//     members trusted within Window of Newest in Spared.
//
// A Trust add moves its member's trust forward to the add's time (or adds
// it and, over Cap, drops the least recently trusted, by time then member),
// and answers the zero count.
//
// Only an add of a new member, group or trust drops one, and only one, as
// the Lua script does: a set over a Cap that a reload lowered keeps its
// size until its members age out of the window.
type MemoryDistinct struct {
	mu   sync.Mutex
	sets map[abuse.DistinctSet]*memorySet
}

type memorySet struct {
	newest  int64
	members map[string]memoryMember
	groups  map[string]int64 // group -> latest sighting
	trusted map[string]int64 // member -> latest trust
	crossed string           // event id of the crossing, "" once the count is back at or under the threshold
}

type memoryMember struct {
	ts    int64
	intro string
}

// NewMemoryDistinct returns empty sets.
func NewMemoryDistinct() *MemoryDistinct {
	return &MemoryDistinct{sets: make(map[abuse.DistinctSet]*memorySet)}
}

// Add records the adds in order and returns the count of each. An empty
// member is an error, and nothing of the batch is recorded.
func (d *MemoryDistinct) Add(ctx context.Context, adds []abuse.DistinctAdd) ([]abuse.DistinctCount, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for i := range adds {
		if adds[i].Member == "" {
			return nil, fmt.Errorf("memory add distinct: add %d: empty member", i)
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]abuse.DistinctCount, len(adds))
	for i := range adds {
		a := &adds[i]
		s := d.sets[a.Set]
		if s == nil {
			s = &memorySet{members: map[string]memoryMember{}, groups: map[string]int64{}, trusted: map[string]int64{}}
			d.sets[a.Set] = s
		}
		if a.Trust {
			s.trust(a, a.TS.UnixMilli())
			continue
		}
		out[i] = s.add(a, a.TS.UnixMilli())
	}
	return out, nil
}

func (s *memorySet) add(a *abuse.DistinctAdd, ts int64) abuse.DistinctCount {
	sp := &a.Spec
	if len(s.members) == 0 {
		s.newest = ts
	}
	s.newest = max(s.newest, ts)
	from := s.newest - sp.Window.Milliseconds()
	maps.DeleteFunc(s.members, func(_ string, v memoryMember) bool { return v.ts < from })
	maps.DeleteFunc(s.groups, func(_ string, t int64) bool { return t < from })
	if s.count(a) <= sp.Threshold {
		s.crossed = ""
	}
	var c abuse.DistinctCount
	if v, ok := s.members[a.Member]; ok {
		v.ts = max(v.ts, ts)
		s.members[a.Member] = v
		if a.Group != "" && ts >= from {
			s.sightGroup(a.Group, ts, sp.Cap)
		}
		c.Introduced = v.intro == a.EventID
		c.Crossed = c.Introduced && s.crossed == a.EventID
	} else if ts >= from {
		capacity := sp.Cap
		if s.crossed == "" && s.count(a) > sp.Threshold {
			capacity = math.MaxInt64 // it crosses a lowered threshold: nothing goes
		}
		s.members[a.Member] = memoryMember{ts: ts, intro: a.EventID}
		if int64(len(s.members)) > capacity {
			delete(s.members, s.ordered()[len(s.members)-1])
		}
		if a.Group != "" {
			s.sightGroup(a.Group, ts, capacity)
		}
		c.Introduced = true
		if s.crossed == "" && s.count(a) > sp.Threshold {
			c.Crossed = true
			s.crossed = a.EventID
		}
	}
	c.Newest = time.UnixMilli(s.newest).UTC()
	c.Count = s.count(a)
	if c.Count <= sp.Threshold {
		c.Crossed = false
		return c
	}
	ordered := s.ordered()
	c.Last = time.UnixMilli(s.members[ordered[0]].ts).UTC()
	c.First = time.UnixMilli(s.members[ordered[len(ordered)-1]].ts).UTC()
	n := min(len(ordered), sp.Samples)
	if c.Crossed && sp.AllOnCross {
		n = len(ordered)
	}
	trustedFrom := s.newest - sp.Window.Milliseconds()
	for _, m := range ordered[:n] {
		if t, ok := s.trusted[m]; ok && t >= trustedFrom {
			c.Spared = append(c.Spared, m)
		} else {
			c.Members = append(c.Members, m)
		}
	}
	t, ok := s.trusted[a.Member]
	c.Trusted = ok && t >= trustedFrom
	return c
}

// count is the set's count for an add: its groups' when the add has one.
func (s *memorySet) count(a *abuse.DistinctAdd) int64 {
	if a.Group != "" {
		return int64(len(s.groups))
	}
	return int64(len(s.members))
}

// sightGroup moves g forward to ts, or adds it and, over capacity, drops
// the least recently seen group. Only an added group drops one: a set over
// a cap a reload lowered keeps its size.
func (s *memorySet) sightGroup(g string, ts, capacity int64) {
	_, kept := s.groups[g]
	s.groups[g] = max(s.groups[g], ts)
	if !kept && int64(len(s.groups)) > capacity {
		delete(s.groups, leastRecent(s.groups))
	}
}

func (s *memorySet) trust(a *abuse.DistinctAdd, ts int64) {
	_, kept := s.trusted[a.Member]
	s.trusted[a.Member] = max(s.trusted[a.Member], ts)
	if !kept && int64(len(s.trusted)) > a.Spec.Cap {
		delete(s.trusted, leastRecent(s.trusted))
	}
}

// leastRecent returns the key of m with the lowest time, ties by the lowest
// key (as Redis's ZPOPMIN).
func leastRecent(m map[string]int64) string {
	var least string
	first := true
	for k, t := range m {
		if first || t < m[least] || (t == m[least] && k < least) {
			least, first = k, false
		}
	}
	return least
}

// ordered returns the members newest first, ties by member in reverse
// byte order (as Redis's ZREVRANGE).
func (s *memorySet) ordered() []string {
	out := slices.Collect(maps.Keys(s.members))
	slices.SortFunc(out, func(a, b string) int {
		if c := cmp.Compare(s.members[b].ts, s.members[a].ts); c != 0 {
			return c
		}
		return cmp.Compare(b, a)
	})
	return out
}
