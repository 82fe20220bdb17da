package userid

import (
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
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
	} {
		for _, s := range tc.spelling {
			if got := Fold(s); got != tc.key {
				t.Errorf("Fold(%q) = %q, want %q", s, got, tc.key)
			}
		}
	}
}

// Every code point alone folds to a key that folds to itself.
func TestFoldIsIdempotentOnEveryCodePoint(t *testing.T) {
	if testing.Short() {
		t.Skip("1.1 million code points")
	}
	for r := rune(0); r <= utf8.MaxRune; r++ {
		if !utf8.ValidRune(r) {
			continue
		}
		if k := Fold(string(r)); Fold(k) != k {
			t.Errorf("%U: Fold = %q, Fold(Fold) = %q", r, k, Fold(k))
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
	for _, s := range []string{"Dave", "ｄａｖｅ", "Straße", "\u212Aelvin", "ϒ", "ꭰꮝ", "ͺ", "ﬃ", "İ", "\xff", "a\u0345\u0301"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k := Fold(s)
		if Fold(k) != k {
			t.Fatalf("Fold(%q) = %q, Fold(Fold) = %q", s, k, Fold(k))
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
// (one), and one beyond ASCII (the normalization passes).
//
//	go test -run '^$' -bench Fold -benchmem ./internal/userid/
func BenchmarkFold(b *testing.B) {
	for _, tc := range []struct{ name, id string }{
		{"folded-ascii", "u-42@example.com"},
		{"mixed-case-ascii", "U-42@Example.com"},
		{"unicode", "Jürgen.Straße"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = Fold(tc.id)
			}
		})
	}
}
