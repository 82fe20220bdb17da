package rules

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// match agrees with a regular expression of the same pattern ('*' as (?s).*)
// on random patterns and values over a small alphabet, where stars, empty
// runs and repeated parts come up often.
func TestWildcardMatchesLikeARegexp(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	word := func(n int, alphabet string) string {
		var b strings.Builder
		for range rng.IntN(n + 1) {
			b.WriteByte(alphabet[rng.IntN(len(alphabet))])
		}
		return b.String()
	}
	for range 20000 {
		pattern := word(8, "ab**")
		if !strings.Contains(pattern, "*") {
			pattern += "*"
		}
		value := word(10, "ab")
		parts := strings.Split(pattern, "*")
		for i := range parts {
			parts[i] = regexp.QuoteMeta(parts[i])
		}
		re := regexp.MustCompile(`^(?s)` + strings.Join(parts, ".*") + `$`)
		if got, want := WildcardMatches(pattern, value), re.MatchString(value); got != want {
			t.Fatalf("WildcardMatches(%q, %q) = %v, want %v", pattern, value, got, want)
		}
	}
	if !WildcardMatches("plain", "plain") || WildcardMatches("plain", "plainer") {
		t.Error("a value without '*' must match itself only")
	}
}

// The index picks what trying every wildcard in order of specificity picks
// (the most literal characters, then the fewest stars, then the text), on
// random sets of wildcards and values over a small alphabet, where shared
// first and last parts, empty ones and several matches come up often.
func TestWildcardsPickTheMostSpecific(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	word := func(n int, alphabet string) string {
		var b strings.Builder
		for range rng.IntN(n + 1) {
			b.WriteByte(alphabet[rng.IntN(len(alphabet))])
		}
		return b.String()
	}
	for range 2000 {
		seen := map[string]bool{}
		var values []string
		for range 1 + rng.IntN(12) {
			v := word(6, "ab*")
			if !strings.Contains(v, "*") {
				v += "*"
			}
			if !seen[v] {
				seen[v] = true
				values = append(values, v)
			}
		}
		index := NewWildcards(values)
		ordered := slices.Clone(values)
		slices.SortFunc(ordered, func(a, b string) int {
			wa, _ := parseWildcard(a)
			wb, _ := parseWildcard(b)
			return cmp.Or(cmp.Compare(wb.literal, wa.literal), cmp.Compare(len(wa.parts), len(wb.parts)), strings.Compare(a, b))
		})
		for range 20 {
			v := word(8, "ab")
			want := ""
			for _, o := range ordered {
				if WildcardMatches(o, v) {
					want = o
					break
				}
			}
			got := ""
			if i, ok := index.Match(v); ok {
				got = values[i]
			}
			if got != want {
				t.Fatalf("wildcards %q, value %q: index picks %q, want %q", values, v, got, want)
			}
		}
	}
}

// A lookup tries only the wildcards whose first and last parts fit the
// value, however many siblings there are: none for a value no first part
// starts, one for a value that matches.
func TestWildcardsTryOnlyCandidates(t *testing.T) {
	values := make([]string, 20000)
	for i := range values {
		values[i] = fmt.Sprintf("/api/v%d/*", i)
	}
	index := NewWildcards(values)
	for v, want := range map[string]struct {
		match string
		tried int
	}{
		"/other/1":          {"", 0},
		"/api/v":            {"", 0},
		"/api/v17/books":    {"/api/v17/*", 1},
		"/api/v19999/books": {"/api/v19999/*", 1},
	} {
		best, tried := index.match(v)
		got := ""
		if best >= 0 {
			got = values[best]
		}
		if got != want.match || tried != want.tried {
			t.Errorf("%s: matched %q after trying %d wildcards, want %q after %d", v, got, tried, want.match, want.tried)
		}
	}
}
