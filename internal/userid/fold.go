// Package userid is the key of a user id: the one form in which every
// spelling of an account (dave, Dave, DAVE, ｄａｖｅ, " dave", "da\u200bve")
// is limited, banned and counted. It is pure: it imports only
// golang.org/x/text.
package userid

import (
	"slices"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/cases"
	"golang.org/x/text/transform"
	"golang.org/x/text/unicode/norm"
)

// MaxKeyBytes bounds a key and the work of finding it. Compatibility
// decomposition expands some characters up to 11 times (ﷺ, 3 bytes, is 33),
// so a 512-byte id (the API's bound) could otherwise make a 5.6 KB key at a
// millisecond of CPU. No 512-byte id of characters that expand at most 4
// times (every script's letters, Hangul, case folding's ß and ΐ) comes near
// it.
const MaxKeyBytes = 2048

// maxRounds bounds the passes of Fold over a string that is not yet
// stable: two suffice for every string seen (see Fold), the rest is margin.
const maxRounds = 6

// folder is Unicode case folding, which golang.org/x/text documents as
// stateless and safe for concurrent use.
var folder = cases.Fold()

// buffers holds the two MaxKeyBytes buffers of one pass.
var buffers = sync.Pool{New: func() any { return new([2][MaxKeyBytes]byte) }}

// Fold returns the key of a user id: without its default-ignorable
// characters and the white space at its ends (strip), NFKC, full Unicode
// case folding, and NFKC again, repeated until the result no longer
// changes. Two ids that differ only by case, by compatibility forms
// (full-width letters, ligatures, the Kelvin sign), by characters that
// render as nothing (zero-width spaces and joiners, soft hyphens, bidi
// marks, variation selectors) or by white space at their ends have the
// same key, and Fold(Fold(id)) == Fold(id). Short of trimming, that is
// Unicode's NFKC_Casefold, the mapping of its caseless identifier
// matching; applications commonly trim what a login form sends.
//
// One pass is not enough. Case folding can leave a string that NFKC
// changes (ϒ folds to itself and NFKC makes it Υ, which folds to υ), hence
// NFKC on both sides; and golang.org/x/text folds each Cherokee letter to
// the other case (Ꭰ to ꭰ and ꭰ to Ꭰ), so those strings never settle. When
// the passes come back to a string already seen, the key is the smallest
// (bytewise) of the strings in that cycle: the same whichever of them the
// id started from.
//
// An id longer than MaxKeyBytes, or whose compatibility decomposition is
// (found from the tables, before any pass), is its own key, and so is the
// last form of an id whose next pass would be longer: folding stops there,
// and the key is still stable.
//
// An ASCII id costs a scan, and no allocation when it has no upper-case
// letter; it is then its own key, or the part of it within white space.
func Fold(id string) string {
	if len(id) > MaxKeyBytes {
		return id
	}
	upper := false
	for i := 0; i < len(id); i++ {
		c := id[i]
		if c >= utf8.RuneSelf {
			return foldUnicode(id)
		}
		upper = upper || ('A' <= c && c <= 'Z')
	}
	if n := len(id); n > 0 && (asciiSpace[id[0]] || asciiSpace[id[n-1]]) {
		id = strip(id) // ASCII has no default-ignorable character
	}
	if !upper {
		return id
	}
	return strings.ToLower(id) // what the passes make of ASCII
}

// asciiSpace holds the ASCII white space (unicode.IsSpace).
var asciiSpace = [utf8.RuneSelf]bool{'\t': true, '\n': true, '\v': true, '\f': true, '\r': true, ' ': true}

// strip returns s without its default-ignorable characters (Unicode's
// Default_Ignorable_Code_Point: they render as nothing) and without the
// white space at its ends, or s itself when that would leave nothing (such
// an id names no account, and an empty key would be no user). Bytes that
// are not UTF-8 are kept as they are.
func strip(s string) string {
	t := strings.TrimFunc(s, unicode.IsSpace)
	if i := strings.IndexFunc(t, ignorable); i >= 0 {
		b := make([]byte, i, len(t))
		copy(b, t)
		for j := i; j < len(t); {
			r, n := utf8.DecodeRuneInString(t[j:])
			if !ignorable(r) { // an invalid byte decodes as RuneError, which is not ignorable
				b = append(b, t[j:j+n]...)
			}
			j += n
		}
		t = strings.TrimFunc(string(b), unicode.IsSpace) // "\u200b dave"
	}
	if t == "" {
		return s
	}
	return t
}

// ignorable reports whether r is a Default_Ignorable_Code_Point, derived
// from the tables as Unicode derives it: Other_Default_Ignorable_Code_Point,
// format characters (Cf) and variation selectors, but white space, the
// interlinear annotation and Egyptian hieroglyph format characters, and the
// prepended concatenation marks, which are visible.
func ignorable(r rune) bool {
	switch {
	case r < 0xAD: // the first is the soft hyphen
		return false
	case unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r), unicode.Is(unicode.Variation_Selector, r):
		return true
	case !unicode.Is(unicode.Cf, r), unicode.IsSpace(r), unicode.Is(unicode.Prepended_Concatenation_Mark, r):
		return false
	}
	return (r < 0xFFF9 || r > 0xFFFB) && (r < 0x13430 || r > 0x13440)
}

// foldUnicode is Fold beyond ASCII.
func foldUnicode(id string) string {
	if decomposedLen(id) > MaxKeyBytes {
		return id
	}
	var seen [maxRounds + 1]string
	seen[0] = strip(id)
	for n := 1; n <= maxRounds; n++ {
		if n > 1 && settled(seen[n-1]) {
			return seen[n-1]
		}
		next, ok := pass(seen[n-1])
		if !ok {
			return seen[n-1]
		}
		for i := range n {
			if seen[i] == next {
				return slices.Min(seen[i:n])
			}
		}
		seen[n] = next
	}
	return seen[maxRounds]
}

// pass returns strip(NFKC(fold(NFKC(s)))), or false when a step would be
// longer than MaxKeyBytes. Strip again because NFKC inserts U+034F, which
// is ignorable, into a run of more than 30 combining marks, and may map a
// character to white space and a mark (´ is " \u0301").
func pass(s string) (string, bool) {
	bufs := buffers.Get().(*[2][MaxKeyBytes]byte)
	defer buffers.Put(bufs)
	b, ok := apply(norm.NFKC, bufs[0][:], []byte(s))
	if ok {
		b, ok = apply(folder, bufs[1][:], b)
	}
	if ok {
		b, ok = apply(norm.NFKC, bufs[0][:], b)
	}
	return strip(string(b)), ok
}

// apply transforms all of src into dst, or reports false when it does not
// fit (or the transformer fails).
func apply(t transform.Transformer, dst, src []byte) ([]byte, bool) {
	n, m, err := t.Transform(dst, src, true)
	return dst[:n], err == nil && m == len(src)
}

// decomposedLen returns the length of s's compatibility decomposition, or
// more than MaxKeyBytes as soon as it passes that: a table lookup per
// character.
func decomposedLen(s string) int {
	n := 0
	for i := 0; i < len(s) && n <= MaxKeyBytes; {
		p := norm.NFKD.PropertiesString(s[i:])
		size := max(p.Size(), 1) // an invalid byte is one
		if d := p.Decomposition(); d != nil {
			n += len(d)
		} else {
			n += size
		}
		i += size
	}
	return n
}

// settled reports whether a pass leaves s as it is: NFKC, case folded,
// and stripped.
func settled(s string) bool {
	if !norm.NFKC.IsNormalString(s) || strip(s) != s {
		return false
	}
	n, err := folder.Span([]byte(s), true)
	return err == nil && n == len(s)
}
