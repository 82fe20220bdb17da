package rules

import "strings"

// wildcard is a descriptor value with '*' in it: each '*' matches any run
// of characters, the empty one included, as envoyproxy/ratelimit matches
// them (trailing "/files/*", middle "/api/*/action", several "a*b*c").
type wildcard struct {
	parts []string // the literal text around the stars: len(parts) = stars + 1
}

// parseWildcard returns the wildcard of value, or false when it has no '*'.
func parseWildcard(value string) (wildcard, bool) {
	if !strings.Contains(value, "*") {
		return wildcard{}, false
	}
	return wildcard{parts: strings.Split(value, "*")}, true
}

// match reports whether v matches: it starts with the first part, ends with
// the last, and holds the others in order between them. Taking each middle
// part at its first place is never wrong (a later place leaves less room
// for the rest), so the cost is a few substring searches, whatever v.
func (w wildcard) match(v string) bool {
	first, last := w.parts[0], w.parts[len(w.parts)-1]
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

// literal is the number of characters a value must have to match: the
// more, the more specific the wildcard.
func (w wildcard) literal() int {
	n := 0
	for _, p := range w.parts {
		n += len(p)
	}
	return n
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
