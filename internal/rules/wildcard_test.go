package rules

import (
	"math/rand/v2"
	"regexp"
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
