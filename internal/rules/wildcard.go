package rules

import (
	"cmp"
	"slices"
	"strings"
)

// wildcard is a descriptor value with '*' in it: each '*' matches any run
// of characters, the empty one included, as envoyproxy/ratelimit matches
// them (trailing "/files/*", middle "/api/*/action", several "a*b*c").
type wildcard struct {
	parts []string // the literal text around the stars: len(parts) = stars + 1
	// literal is the number of characters a value must have to match: the
	// more, the more specific the wildcard.
	literal int
}

// parseWildcard returns the wildcard of value, or false when it has no '*'.
func parseWildcard(value string) (wildcard, bool) {
	if !strings.Contains(value, "*") {
		return wildcard{}, false
	}
	return wildcard{parts: strings.Split(value, "*"), literal: len(value) - strings.Count(value, "*")}, true
}

func (w wildcard) first() string { return w.parts[0] }
func (w wildcard) last() string  { return w.parts[len(w.parts)-1] }

// match reports whether v matches: it starts with the first part, ends with
// the last, and holds the others in order between them. Taking each middle
// part at its first place is never wrong (a later place leaves less room
// for the rest), so the cost is a few substring searches, whatever v.
func (w wildcard) match(v string) bool {
	first, last := w.first(), w.last()
	if len(v) < len(first)+len(last) || !strings.HasPrefix(v, first) || !strings.HasSuffix(v, last) {
		return false
	}
	v = v[len(first) : len(v)-len(last)]
	for _, p := range w.parts[1 : len(w.parts)-1] {
		i := strings.Index(v, p)
		if i < 0 {
			return false
		}
		v = v[i+len(p):]
	}
	return true
}

// IsWildcard reports whether e's value is a wildcard (has a '*').
func (e DescriptorEntry) IsWildcard() bool { return strings.Contains(e.Value, "*") }

// WildcardMatches reports whether value matches pattern, a descriptor value
// with '*' (see DescriptorEntry); a pattern without one matches itself only.
func WildcardMatches(pattern, value string) bool {
	w, ok := parseWildcard(pattern)
	if !ok {
		return pattern == value
	}
	return w.match(value)
}

// Wildcards indexes the wildcard values of one descriptor key, so that
// finding the most specific one a value matches costs what the value's
// length does, not what the number of wildcards does: they are grouped by
// their first literal part, then by their last, and a lookup only tries the
// groups whose first part starts the value and whose last part ends it (a
// map lookup per distinct length of those parts). Within a group the most
// specific is tried first, so a lookup stops at its first match there.
// Wildcards that begin and end with '*' share one group, tried one by one.
type Wildcards struct {
	values    []string
	patterns  []wildcard
	byFirst   map[string]*lastGroups
	firstLens []int // the distinct lengths of the keys of byFirst, ascending
}

// lastGroups are the wildcards of one first part, by their last part.
type lastGroups struct {
	byLast   map[string][]int32 // indexes of patterns, the most specific first
	lastLens []int              // the distinct lengths of the keys of byLast, ascending
}

// NewWildcards indexes values, each a wildcard (with '*'); a value without
// one is never matched.
func NewWildcards(values []string) *Wildcards {
	w := &Wildcards{values: values, patterns: make([]wildcard, len(values)), byFirst: map[string]*lastGroups{}}
	for i, v := range values {
		p, ok := parseWildcard(v)
		if !ok {
			continue
		}
		w.patterns[i] = p
		g := w.byFirst[p.first()]
		if g == nil {
			g = &lastGroups{byLast: map[string][]int32{}}
			w.byFirst[p.first()] = g
			w.firstLens = append(w.firstLens, len(p.first()))
		}
		if g.byLast[p.last()] == nil {
			g.lastLens = append(g.lastLens, len(p.last()))
		}
		g.byLast[p.last()] = append(g.byLast[p.last()], int32(i))
	}
	w.firstLens = sortedUnique(w.firstLens)
	for _, g := range w.byFirst {
		g.lastLens = sortedUnique(g.lastLens)
		for _, list := range g.byLast {
			slices.SortFunc(list, func(a, b int32) int { return w.moreSpecific(int(a), int(b)) })
		}
	}
	return w
}

func sortedUnique(s []int) []int {
	slices.Sort(s)
	return slices.Compact(s)
}

// moreSpecific orders wildcards: the most literal characters first, then
// the fewest stars, then by text, then by index, so the order never
// depends on the rules'.
func (w *Wildcards) moreSpecific(a, b int) int {
	pa, pb := &w.patterns[a], &w.patterns[b]
	return cmp.Or(cmp.Compare(pb.literal, pa.literal), cmp.Compare(len(pa.parts), len(pb.parts)),
		strings.Compare(w.values[a], w.values[b]), cmp.Compare(a, b))
}

// Match returns the index in the values indexed of the most specific
// wildcard that v matches, or false when none does.
func (w *Wildcards) Match(v string) (int, bool) {
	best, _ := w.match(v)
	return best, best >= 0
}

// match is Match, returning -1 for none, and how many wildcards it tried.
func (w *Wildcards) match(v string) (best, tried int) {
	best = -1
	for _, fl := range w.firstLens {
		if fl > len(v) {
			break
		}
		g := w.byFirst[v[:fl]]
		if g == nil {
			continue
		}
		for _, ll := range g.lastLens {
			if fl+ll > len(v) {
				break
			}
			for _, i := range g.byLast[v[len(v)-ll:]] {
				if best >= 0 && w.moreSpecific(int(i), best) > 0 {
					break // the rest of the group is less specific still
				}
				tried++
				if w.patterns[i].match(v) {
					best = int(i)
					break
				}
			}
		}
	}
	return best, tried
}
