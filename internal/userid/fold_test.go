package userid

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"
)

func TestFold(t *testing.T) {
	for _, tc := range []struct {
		key      string
		spelling []string
	}{
		{"dave", []string{"dave", "Dave", "dAve", "DAVE", "ｄａｖｅ", "ＤＡＶＥ"}},
		{"kelvin", []string{"Kelvin", "\u212Aelvin"}}, // the Kelvin sign
		{"strasse", []string{"Straße", "STRASSE", "strasse"}},
		{"file", []string{"ﬁle", "FILE"}},
		{"xii", []string{"Ⅻ", "xii"}},
		{"υ", []string{"ϒ", "Υ", "υ"}},     // NFKC after folding: ϒ folds to itself
		{"ᎠᏍᎦᏯ", []string{"ᎠᏍᎦᏯ", "ꭰꮝꭶꮿ"}}, // Cherokee: one pass swaps its case
		{"u-42@example.com", []string{"U-42@Example.COM"}},
		{"", []string{""}},
		// What renders as nothing, and white space at the ends: what a
		// trimming login form or NFKC_Casefold takes for the same id.
		{"ivan", []string{" ivan", "ivan ", " Ivan\t", "\u00a0ivan", "IVAN\u3000", "ivan\u200b", "iv\u00adan", "\ufeffivan",
			"iv\u200dan", "ivan\ufe0f", "iv\u2060an", "\u200eivan", "\u200b ivan", "\u115fivan", "ｉｖａｎ\u3000"}},
		{"da ve", []string{"da ve", " DA VE "}}, // inner space is kept
		{"   ", []string{"   "}},                // nothing but space: no account, but not no user
		{"\u200b", []string{"\u200b"}},
		{"\u0301dave", []string{"\u00b4Dave"}}, // ´ is a space and a mark: the space goes
	} {
		for _, s := range tc.spelling {
			if got := Fold(s); got != tc.key {
				t.Errorf("Fold(%q) = %q, want %q", s, got, tc.key)
			}
		}
	}
}

// The default-ignorable characters are those of Unicode's
// DerivedCoreProperties.txt: a sample of each range it lists, and of the
// format characters it leaves out.
func TestIgnorable(t *testing.T) {
	for _, r := range []rune{0xAD, 0x34F, 0x61C, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x180B, 0x180E, 0x180F, 0x200B, 0x200F,
		0x202A, 0x202E, 0x2060, 0x2065, 0x206F, 0x3164, 0xFE00, 0xFE0F, 0xFEFF, 0xFFA0, 0xFFF0, 0xFFF8, 0x1BCA0, 0x1BCA3,
		0x1D173, 0x1D17A, 0xE0000, 0xE0001, 0xE007F, 0xE0100, 0xE0FFF} {
		if !ignorable(r) {
			t.Errorf("%U is default-ignorable", r)
		}
	}
	for _, r := range []rune{'a', ' ', 0xA0, 0x301, 0x600, 0x605, 0x6DD, 0x70F, 0x8E2, 0x110BD, 0x110CD, 0xFFF9, 0xFFFB,
		0x13430, 0x1343F, 0x2028, 0x3000, 0xFFFD} {
		if ignorable(r) {
			t.Errorf("%U is not default-ignorable", r)
		}
	}
}

// Every character alone (every graphic or format code point: the others
// have no decomposition or case) folds to a key that folds to itself, the
// key the unbounded passes give.
func TestFoldIsIdempotentOnEveryCharacter(t *testing.T) {
	if testing.Short() {
		t.Skip("150 000 characters")
	}
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if !unicode.IsGraphic(r) && !unicode.Is(unicode.Cf, r) {
			continue
		}
		k := Fold(string(r))
		if Fold(k) != k {
			t.Errorf("%U: Fold = %q, Fold(Fold) = %q", r, k, Fold(k))
		}
		if ref, _ := reference(string(r)); k != ref {
			t.Errorf("%U: Fold = %q, the unbounded passes %q", r, k, ref)
		}
	}
}

// reference is Fold without its bounds and shortcuts: the passes until a
// string comes back, the smallest of the cycle; and the longest string it
// went through, its compatibility decomposition included.
func reference(s string) (string, int) {
	longest := max(len(s), len(norm.NFKD.String(s)))
	s = strip(s)
	seen := []string{s}
	for {
		a := norm.NFKC.String(s)
		b := cases.Fold().String(a)
		next := strip(norm.NFKC.String(b))
		longest = max(longest, len(a), len(b), len(next))
		if i := slices.Index(seen, next); i >= 0 {
			return slices.Min(seen[i:]), longest
		}
		seen, s = append(seen, next), next
	}
}

// An id whose characters expand past MaxKeyBytes is its own key, found at
// the cost of MaxKeyBytes of output (see BenchmarkFold/expanding), not of
// the 5.6 KB its passes would make.
func TestFoldBoundsItsWork(t *testing.T) {
	for _, id := range []string{strings.Repeat("\uFDFA", 170), "Dave" + strings.Repeat("\uFDFA", 100), strings.Repeat("Ａ", MaxKeyBytes)} {
		k := Fold(id)
		if k != id || Fold(k) != k {
			t.Errorf("Fold(%.20q...) = %.20q..., want the id itself", id, k)
		}
	}
}

// Fold is safe for concurrent use: the folder it shares is stateless.
func TestFoldConcurrently(t *testing.T) {
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 200 {
				if k := Fold("Jürgen.Straße ꭰ"); k != "jürgen.strasse Ꭰ" {
					t.Errorf("Fold = %q", k)
					return
				}
			}
		})
	}
	wg.Wait()
}

// An id already folded costs no allocation when it is ASCII, the common
// case on the decision path.
func TestFoldAllocations(t *testing.T) {
	for _, id := range []string{"dave", "u-42@example.com", strings.Repeat("x", 512)} {
		if n := testing.AllocsPerRun(100, func() { _ = Fold(id) }); n != 0 {
			t.Errorf("Fold(%q): %v allocations, want 0", id, n)
		}
	}
}

func FuzzFold(f *testing.F) {
	for _, s := range []string{"Dave", "ｄａｖｅ", "Straße", "\u212Aelvin", "ϒ", "ꭰꮝ", "ͺ", "ﬃ", "İ", "\xff", "a\u0345\u0301",
		" Dave\u200b", "\u00b4", "a\u200b\u0301", "\u200b\xff ", "a" + strings.Repeat("\u0301\u0316", 20)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k := Fold(s)
		if Fold(k) != k {
			t.Fatalf("Fold(%q) = %q, Fold(Fold) = %q", s, k, Fold(k))
		}
		// Well within the bound, Fold is the unbounded passes.
		if ref, longest := reference(s); longest < MaxKeyBytes-norm.MaxSegmentSize && k != ref {
			t.Fatalf("Fold(%q) = %q, the unbounded passes %q", s, k, ref)
		}
		if !isASCII(s) {
			return
		}
		if full := foldUnicode(s); full != k {
			t.Fatalf("ASCII %q: fast path %q, full folding %q", s, k, full)
		}
		if up := Fold(strings.ToUpper(s)); up != k {
			t.Fatalf("ASCII %q: key %q, key of its upper case %q", s, k, up)
		}
	})
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// BenchmarkFold is the cost of a user id's key on the decision path: an
// ASCII id already folded (no allocation), one with upper-case letters
// (one), ids beyond ASCII (the normalization passes), and the costliest
// 512-byte ids found: characters that expand past MaxKeyBytes, and runs of
// combining marks.
//
//	go test -run '^$' -bench Fold -benchmem ./internal/userid/
func BenchmarkFold(b *testing.B) {
	for _, tc := range []struct{ name, id string }{
		{"folded-ascii", "u-42@example.com"},
		{"mixed-case-ascii", "U-42@Example.com"},
		{"unicode", "Jürgen.Straße"},
		{"unicode-folded", "jürgen.strasse"},
		{"expanding", strings.Repeat("\uFDFA", 170)},             // 510 bytes the passes would make 5.6 KB of
		{"combining", "a" + strings.Repeat("\u0301\u0345", 127)}, // 509 bytes of marks to reorder
		{"decomposing", strings.Repeat("\u0390", 256)},           // 512 bytes, each ΐ folded to 3 characters and composed back
		{"trimmed", "\u00a0Jürgen.Straße\u200b"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = Fold(tc.id)
			}
		})
	}
}
