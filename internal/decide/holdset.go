package decide

import "container/heap"

// holdSet is the holds of a concurrency key in memory: the lapse (ms) of
// each hold id, with the earliest and the latest lapse at hand. A call
// drops the lapsed holds and reads both bounds, so scanning every hold per
// call would cost O(n) of a key holding n (a million at most): a local-mode
// limiter could be kept busy by the holds of one key. Two heaps of (lapse,
// id) give the bounds in O(log n); a released hold's entries stay in them
// until they come to the top, and both are rebuilt from the map once stale
// entries outnumber live ones, so memory stays within a constant of the
// holds.
type holdSet struct {
	lapse       map[string]int64
	early, late holdHeap // min-heap and max-heap by lapse
}

// holdAt is a heap entry: a hold and its lapse when it was added.
type holdAt struct {
	lapse int64
	id    string
}

func newHoldSet() *holdSet {
	return &holdSet{lapse: make(map[string]int64), late: holdHeap{latest: true}}
}

func (s *holdSet) len() int { return len(s.lapse) }

// get returns the lapse of hold id, if s holds it.
func (s *holdSet) get(id string) (int64, bool) {
	if s == nil {
		return 0, false
	}
	lapse, ok := s.lapse[id]
	return lapse, ok
}

func (s *holdSet) add(id string, lapse int64) {
	s.lapse[id] = lapse
	heap.Push(&s.early, holdAt{lapse, id})
	heap.Push(&s.late, holdAt{lapse, id})
}

// remove drops hold id, reporting whether s held it.
func (s *holdSet) remove(id string) bool {
	if _, ok := s.lapse[id]; !ok {
		return false
	}
	delete(s.lapse, id)
	s.compact()
	return true
}

// dropLapsed drops the holds lapsed by now (lapse <= now) and returns how
// many it dropped.
func (s *holdSet) dropLapsed(now int64) int64 {
	var n int64
	for len(s.early.items) > 0 && s.early.items[0].lapse <= now {
		h := heap.Pop(&s.early).(holdAt)
		if s.live(h) {
			delete(s.lapse, h.id)
			n++
		}
	}
	s.compact()
	return n
}

// first and last return the earliest and the latest lapse of the holds (s
// holds some).
func (s *holdSet) first() int64 { return s.top(&s.early) }
func (s *holdSet) last() int64  { return s.top(&s.late) }

// oldest returns the hold that lapses first, the smallest id among those
// lapsing at once (Redis's ZPOPMIN order), or "" when s holds none.
func (s *holdSet) oldest() string {
	if s.len() == 0 {
		return ""
	}
	s.top(&s.early)
	return s.early.items[0].id
}

// top drops h's stale entries from its top and returns the lapse there.
func (s *holdSet) top(h *holdHeap) int64 {
	for !s.live(h.items[0]) {
		heap.Pop(h)
	}
	return h.items[0].lapse
}

// live reports whether the entry is a hold s holds, with that lapse.
func (s *holdSet) live(h holdAt) bool {
	lapse, ok := s.lapse[h.id]
	return ok && lapse == h.lapse
}

// compact rebuilds the heaps when their stale entries outnumber the holds.
func (s *holdSet) compact() {
	if max(len(s.early.items), len(s.late.items)) <= 2*len(s.lapse)+64 {
		return
	}
	s.early.items, s.late.items = s.early.items[:0], s.late.items[:0]
	for id, lapse := range s.lapse {
		s.early.items = append(s.early.items, holdAt{lapse, id})
		s.late.items = append(s.late.items, holdAt{lapse, id})
	}
	heap.Init(&s.early)
	heap.Init(&s.late)
}

// holdHeap is a heap of holds by lapse, then id: the earliest on top (the
// smallest id of those lapsing at once), or the latest.
type holdHeap struct {
	items  []holdAt
	latest bool
}

func (h *holdHeap) Len() int { return len(h.items) }
func (h *holdHeap) Less(i, j int) bool {
	a, b := h.items[i], h.items[j]
	if h.latest {
		a, b = b, a
	}
	return a.lapse < b.lapse || (a.lapse == b.lapse && a.id < b.id)
}
func (h *holdHeap) Swap(i, j int) { h.items[i], h.items[j] = h.items[j], h.items[i] }
func (h *holdHeap) Push(x any)    { h.items = append(h.items, x.(holdAt)) }
func (h *holdHeap) Pop() any {
	last := h.items[len(h.items)-1]
	h.items[len(h.items)-1] = holdAt{} // let the id go
	h.items = h.items[:len(h.items)-1]
	return last
}
