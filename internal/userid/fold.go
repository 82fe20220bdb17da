// Package userid is the key of a user id: the one form in which every
// spelling of an account (dave, Dave, DAVE, ｄａｖｅ) is limited, banned and
// counted. It is pure: it imports only golang.org/x/text.
package userid

import (
	"strings"
	"unicode/utf8"

	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"
)

// folder is Unicode case folding, which golang.org/x/text documents as
// stateless and safe for concurrent use.
var folder = cases.Fold()

// maxRounds bounds the passes of Fold over a string that is not yet
// stable: two suffice for every string seen (see Fold), the rest is margin.
const maxRounds = 6

// Fold returns the key of a user id: NFKC, full Unicode case folding, and
// NFKC again, repeated until the result no longer changes. Two ids that
// differ only by case or by compatibility forms (full-width letters,
// ligatures, the Kelvin sign) have the same key, and Fold(Fold(id)) ==
// Fold(id).
//
// One pass is not enough. Case folding can leave a string that NFKC
// changes (ϒ folds to itself and NFKC makes it Υ, which folds to υ), hence
// NFKC on both sides; and golang.org/x/text folds each Cherokee letter to
// the other case (Ꭰ to ꭰ and ꭰ to Ꭰ), so those strings never settle. When
// the passes come back to a string already seen, the key is the smallest
// (bytewise) of the strings in that cycle: the same whichever of them the
// id started from.
//
// An ASCII id costs a scan, and no allocation when it has no upper-case
// letter; it is then its own key.
func Fold(id string) string {
	upper := false
	for i := 0; i < len(id); i++ {
		c := id[i]
		if c >= utf8.RuneSelf {
			return foldUnicode(id)
		}
		upper = upper || ('A' <= c && c <= 'Z')
	}
	if !upper {
		return id
	}
	return strings.ToLower(id) // what the passes make of ASCII
}

// foldUnicode is Fold beyond ASCII.
func foldUnicode(id string) string {
	var seen [maxRounds + 1]string
	seen[0] = id
	for n := 1; n <= maxRounds; n++ {
		next := norm.NFKC.String(folder.String(norm.NFKC.String(seen[n-1])))
		for i := range n {
			if seen[i] == next {
				return smallest(seen[i:n])
			}
		}
		seen[n] = next
	}
	return seen[maxRounds]
}

func smallest(ss []string) string {
	m := ss[0]
	for _, s := range ss[1:] {
		m = min(m, s)
	}
	return m
}
