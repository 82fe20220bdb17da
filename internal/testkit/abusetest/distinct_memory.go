package abusetest

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/ratewarden/ratewarden/internal/abuse"
)

// MemoryDistinct is the in-memory abuse.Distinct: the reference the Redis
// implementation is tested against, and the state of replay tests. Times
// are truncated to milliseconds. Per set, on each add:
//   - Newest becomes the larger of itself and the add's time;
//   - members seen before Newest-Window are dropped;
//   - a member already kept moves forward to the add's time when later;
//     Introduced when the event that brought it in is this one;
//   - a new member within the window is added with this event as its
//     introducer (Introduced), then, over Cap, the least recently seen
//     member (by time, then member) is dropped, possibly itself; Crossed
//     when the count went from Threshold or less to more, and the set
//     remembers this event as its crossing;
//   - a kept member introduced by this event whose crossing it was is
//     Crossed again (a redelivery);
//   - the count, bounds and members follow abuse.DistinctCount.
type MemoryDistinct struct {
	mu   sync.Mutex
	sets map[abuse.DistinctSet]*memorySet
}

type memorySet struct {
	newest  int64
	members map[string]memoryMember
	crossed string // event id of the last crossing
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
		ts := a.TS.UnixMilli()
		if s == nil {
			s = &memorySet{newest: ts, members: map[string]memoryMember{}}
			d.sets[a.Set] = s
		}
		out[i] = s.add(a, ts)
	}
	return out, nil
}

func (s *memorySet) add(a *abuse.DistinctAdd, ts int64) abuse.DistinctCount {
	sp := &a.Spec
	s.newest = max(s.newest, ts)
	from := s.newest - sp.Window.Milliseconds()
	for m, v := range s.members {
		if v.ts < from {
			delete(s.members, m)
		}
	}
	var c abuse.DistinctCount
	if v, ok := s.members[a.Member]; ok {
		v.ts = max(v.ts, ts)
		s.members[a.Member] = v
		c.Introduced = v.intro == a.EventID
		c.Crossed = c.Introduced && s.crossed == a.EventID
	} else if ts >= from {
		before := int64(len(s.members))
		s.members[a.Member] = memoryMember{ts: ts, intro: a.EventID}
		if int64(len(s.members)) > sp.Cap {
			delete(s.members, s.ordered()[len(s.members)-1])
		}
		c.Introduced = true
		if before <= sp.Threshold && int64(len(s.members)) > sp.Threshold {
			c.Crossed = true
			s.crossed = a.EventID
		}
	}
	c.Newest = time.UnixMilli(s.newest).UTC()
	c.Count = int64(len(s.members))
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
	c.Members = ordered[:n:n]
	return c
}

// ordered returns the members newest first, ties by member in reverse
// byte order (as Redis's ZREVRANGE).
func (s *memorySet) ordered() []string {
	out := make([]string, 0, len(s.members))
	for m := range s.members {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b string) int {
		if c := cmp.Compare(s.members[b].ts, s.members[a].ts); c != 0 {
			return c
		}
		return cmp.Compare(b, a)
	})
	return out
}
