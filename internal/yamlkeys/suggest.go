// Package yamlkeys explains YAML decoding errors in the terms of the
// file's writer: an unknown key with the key it most likely misspells
// ("did you mean"), a value of the wrong form by the key it is written
// under and the form expected, never by the Go types that read it. The
// keys of each mapping are derived from the yaml tags of the type it
// decodes into, so that they cannot drift from what the decoder accepts.
//
// The package is pure: it imports the YAML library and nothing else
// outside the standard library.
package yamlkeys

import (
	"strings"
	"unicode/utf8"
)

// maxCompared bounds the length (in characters) of a key compared by edit
// distance: a longer one is no misspelling of a key of a schema, and the
// comparison costs the product of the lengths.
const maxCompared = 64

// Suggest returns the candidate that key most likely misspells, or "" when
// none is clearly the one: the candidate equal to key but for case, '_'
// and '-'; else the one nearest by edit distance (Damerau-Levenshtein,
// adjacent transpositions counting one), within 1 edit for keys of up to
// 5 characters and 2 for longer ones, when no other candidate is as near;
// else the one candidate that key is the start of (3 characters at
// least: "shadow" for "shadow_mode"). A candidate equal to key is never
// suggested.
func Suggest(key string, candidates []string) string {
	if key == "" || utf8.RuneCountInString(key) > maxCompared {
		return ""
	}
	if c, ok := only(candidates, key, func(c string) bool { return c != key && fold(c) == fold(key) }); ok {
		return c
	}
	limit := 1
	if utf8.RuneCountInString(key) > 5 {
		limit = 2
	}
	best, bestD, ties := "", limit+1, 0
	lower := strings.ToLower(key)
	for _, c := range candidates {
		if c == key {
			continue
		}
		d := distance(lower, strings.ToLower(c), limit)
		switch {
		case d < bestD:
			best, bestD, ties = c, d, 0
		case d == bestD && c != best:
			ties++
		}
	}
	if best != "" && ties == 0 {
		return best
	}
	if len(key) >= 3 {
		if c, ok := only(candidates, key, func(c string) bool { return c != key && strings.HasPrefix(c, key) }); ok {
			return c
		}
	}
	return ""
}

// only returns the one distinct candidate that ok accepts.
func only(candidates []string, key string, ok func(string) bool) (string, bool) {
	found := ""
	for _, c := range candidates {
		if !ok(c) || c == found {
			continue
		}
		if found != "" {
			return "", false
		}
		found = c
	}
	return found, found != ""
}

// fold is s lower-case without '_' and '-', so that "requestsPerUnit" and
// "requests-per-unit" meet "requests_per_unit".
func fold(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '_' || r == '-' {
			return -1
		}
		return r
	}, strings.ToLower(s))
}

// distance is the optimal string alignment distance between a and b
// (insertions, deletions, substitutions and transpositions of adjacent
// characters), or limit+1 when it is more than limit.
func distance(a, b string, limit int) int {
	ra, rb := []rune(a), []rune(b)
	if len(ra) > maxCompared || len(rb) > maxCompared {
		return limit + 1
	}
	if d := len(ra) - len(rb); d > limit || -d > limit {
		return limit + 1
	}
	// rows i-2, i-1 and i of the table.
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		rowMin := cur[0]
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			v := min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				v = min(v, prev2[j-2]+1)
			}
			cur[j] = v
			rowMin = min(rowMin, v)
		}
		if rowMin > limit {
			return limit + 1
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return min(prev[len(rb)], limit+1)
}
