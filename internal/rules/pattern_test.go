package rules

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestPatternMatch(t *testing.T) {
	tests := []struct {
		pattern string
		yes     []string
		no      []string
	}{
		{"/", []string{"/"}, []string{"", "/a", "//"}},
		{"/api/login", []string{"/api/login"}, []string{"/api/login/", "/api/logins", "/api", "api/login", "/API/login"}},
		{"/api/?ogin", []string{"/api/login", "/api/bogin", "/api/éogin"}, []string{"/api/ogin", "/api/llogin", "/api//ogin"}},
		{"/a/???", []string{"/a/abc", "/a/日本語"}, []string{"/a/ab", "/a/abcd", "/a/a/c"}},
		{"/api/*", []string{"/api/x", "/api/", "/api/books"}, []string{"/api", "/api/x/y", "/apix"}},
		{"/api/*.json", []string{"/api/a.json", "/api/.json"}, []string{"/api/a.jsonx", "/api/a/b.json", "/api/a.js"}},
		{"/api/a*b*c", []string{"/api/abc", "/api/aXbYc", "/api/abbbc", "/api/acbc"}, []string{"/api/acb", "/api/ab", "/api/bac"}},
		{"/api/**", []string{"/api", "/api/", "/api/x", "/api/x/y/z"}, []string{"/apix", "/ap", "/", "/x/api"}},
		{"/**", []string{"/", "/a", "/a/b/c", "//"}, []string{"", "a"}},
		{"/**/login", []string{"/login", "/a/login", "/a/b/login"}, []string{"/login/x", "/a/logins", "/"}},
		{"/a/**/b", []string{"/a/b", "/a/x/b", "/a/x/y/b", "/a/b/b"}, []string{"/a", "/a/b/c", "/b", "/a/xb"}},
		{"/a/**/b/**/c", []string{"/a/b/c", "/a/1/b/2/3/c", "/a/b/b/c/c"}, []string{"/a/c/b", "/a/b"}},
		{"/a/**/**", []string{"/a", "/a/b", "/a/b/c"}, []string{"/b"}},
		{"/*/*", []string{"/a/b", "/a/", "//"}, []string{"/a", "/a/b/c"}},
		{"/users/*/orders/**", []string{"/users/42/orders", "/users/42/orders/7/items"}, []string{"/users/orders", "/users/42/order"}},
	}
	for _, tt := range tests {
		t.Run(tt.pattern, func(t *testing.T) {
			p, err := compilePattern(tt.pattern)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range tt.yes {
				if !p.Match(s) {
					t.Errorf("%q should match %q", tt.pattern, s)
				}
				if !refMatch(tt.pattern, s) {
					t.Errorf("reference: %q should match %q", tt.pattern, s)
				}
			}
			for _, s := range tt.no {
				if p.Match(s) {
					t.Errorf("%q should not match %q", tt.pattern, s)
				}
				if refMatch(tt.pattern, s) {
					t.Errorf("reference: %q should not match %q", tt.pattern, s)
				}
			}
		})
	}
}

func TestCompilePatternErrors(t *testing.T) {
	tests := []struct{ name, pattern, want string }{
		{"empty", "", "must not be empty"},
		{"relative", "api/x", "must start with /"},
		{"double slash", "/a//b", "empty segment"},
		{"trailing slash", "/a/", "empty segment"},
		{"dot", "/a/./b", ". or .."},
		{"dotdot", "/a/../b", ". or .."},
		{"partial double star", "/a/**b", "whole segment"},
		{"triple star", "/a/***", "whole segment"},
		{"percent", "/a%20b", "must not contain %"},
		{"hash", "/a#b", "must not contain #"},
		{"control", "/a\nb", "control"},
		{"invalid utf8", "/a\xff", "UTF-8"},
		{"too long", "/" + strings.Repeat("a", 1024), "at most 1024"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := compilePattern(tt.pattern)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("compilePattern(%q) = %v, want error containing %q", tt.pattern, err, tt.want)
			}
		})
	}
}

func TestPatternMatchDoesNotAllocate(t *testing.T) {
	p := mustCompilePattern("/api/**/x*y?/**/end")
	path := "/api/a/b/xAAyB/c/d/end"
	if !p.Match(path) {
		t.Fatal("no match")
	}
	if n := testing.AllocsPerRun(100, func() { p.Match(path) }); n != 0 {
		t.Fatalf("Match allocates %v times", n)
	}
}

// refMatch is a deliberately simple, independent matcher: recursion over
// split segments, then over characters.
func refMatch(pattern, path string) bool {
	if path == "" || path[0] != '/' {
		return false
	}
	return refSegs(splitRef(pattern), splitRef(path))
}

func splitRef(s string) []string {
	if s == "/" {
		return nil
	}
	return strings.Split(s[1:], "/")
}

func refSegs(p, s []string) bool {
	memo := map[[2]int]bool{}
	var rec func(i, j int) bool
	rec = func(i, j int) bool {
		if v, ok := memo[[2]int{i, j}]; ok {
			return v
		}
		var r bool
		switch {
		case i == len(p):
			r = j == len(s)
		case p[i] == "**":
			r = rec(i+1, j) || j < len(s) && rec(i, j+1)
		default:
			r = j < len(s) && refChars(units(p[i]), units(s[j])) && rec(i+1, j+1)
		}
		memo[[2]int{i, j}] = r
		return r
	}
	return rec(0, 0)
}

// units splits s into UTF-8 sequences, an invalid byte being one unit.
func units(s string) []string {
	var out []string
	for len(s) > 0 {
		_, n := utf8.DecodeRuneInString(s)
		out = append(out, s[:n])
		s = s[n:]
	}
	return out
}

// refChars matches one segment: p and s are lists of characters.
func refChars(p, s []string) bool {
	memo := map[[2]int]bool{}
	var rec func(i, j int) bool
	rec = func(i, j int) bool {
		if v, ok := memo[[2]int{i, j}]; ok {
			return v
		}
		var r bool
		switch {
		case i == len(p):
			r = j == len(s)
		case p[i] == "*":
			r = rec(i+1, j) || j < len(s) && rec(i, j+1)
		case p[i] == "?":
			r = j < len(s) && rec(i+1, j+1)
		default:
			r = j < len(s) && p[i] == s[j] && rec(i+1, j+1)
		}
		memo[[2]int{i, j}] = r
		return r
	}
	return rec(0, 0)
}

func FuzzMatchPattern(f *testing.F) {
	seeds := [][2]string{
		{"/api/**", "/api/x/y"}, {"/a/*b?c", "/a/xxbyc"}, {"/**/x/**", "/x"}, {"/?", "/é"},
		{"/a*a*a*b", "/aaaaaaaaaaaaaaaaaaaa"}, {"/**/**/a", "/b/a/a"}, {"/", "/"}, {"/*", "/\xff"},
	}
	for _, s := range seeds {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, path string) {
		if len(pattern) > 128 || len(path) > 512 {
			return // keep the reference matcher fast
		}
		p, err := compilePattern(pattern)
		if err != nil {
			return
		}
		if got, want := p.Match(path), refMatch(pattern, path); got != want {
			t.Fatalf("compilePattern(%q).Match(%q) = %v, reference %v", pattern, path, got, want)
		}
	})
}
