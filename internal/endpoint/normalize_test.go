package endpoint

import (
	"path"
	"strings"
	"testing"
)

func TestNormalize(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"clean", "/api/login", "/api/login"},
		{"root", "/", "/"},
		{"empty", "", "/"},
		{"no leading slash", "api/login", "/api/login"},
		{"double slash", "/api//login", "/api/login"},
		{"leading double slash", "//api/login", "/api/login"},
		{"dot segment", "/api/./login", "/api/login"},
		{"dotdot segment", "/api/x/../login", "/api/login"},
		{"dotdot above root", "/../../api/login", "/api/login"},
		{"trailing slash", "/api/login/", "/api/login"},
		{"query", "/api/login?user=a&b=c", "/api/login"},
		{"fragment", "/api/login#top", "/api/login"},
		{"query then fragment", "/a?x#y", "/a"},
		{"percent letter", "/api/%6Cogin", "/api/login"},
		{"percent upper hex", "/api/%6c%6F%67%69%6E", "/api/login"},
		{"encoded slash", "/api%2Flogin", "/api/login"},
		{"encoded dot segments", "/api/x/%2e%2e/login", "/api/login"},
		{"encoded double slash", "/api/%2F/login", "/api/login"},
		{"encoded query mark stays in path", "/a%3Fb", "/a?b"},
		{"decoded once only", "/a%256Cogin", "/a%6Cogin"},
		{"invalid escape kept", "/a%zz/b", "/a%zz/b"},
		{"truncated escape kept", "/a%4", "/a%4"},
		{"lone percent", "/100%", "/100%"},
		{"space", "/a%20b", "/a b"},
		{"only query", "?x=1", "/"},
		{"path parameter", "/api/login;jsessionid=1", "/api/login"},
		{"path parameter then slash", "/api/login;a=b/", "/api/login"},
		{"path parameter mid path", "/api;v=2/login", "/api/login"},
		{"parameters on every segment", "/a;x/b;y=1;z/c;", "/a/b/c"},
		{"segment of parameters only", "/api/;x/login", "/api/login"},
		{"dotdot with parameter", "/x/..;/api/login", "/api/login"},
		{"encoded semicolon", "/api/login%3Bjsessionid=1", "/api/login"},
		{"semicolon in query kept out", "/api/login?a=1;b=2", "/api/login"},
		{"only a parameter", ";x", "/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Normalize(tt.in); got != tt.want {
				t.Errorf("Normalize(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestNormalizeCleanDoesNotAllocate(t *testing.T) {
	for _, in := range []string{"/api/books/17", "/", "/api/login?x=1", "/api/login/"} {
		t.Run(in, func(t *testing.T) {
			if n := testing.AllocsPerRun(100, func() { Normalize(in) }); n != 0 {
				t.Errorf("Normalize(%q) allocates %v times", in, n)
			}
		})
	}
}

func FuzzNormalize(f *testing.F) {
	for _, s := range []string{"/api//login", "/a/%2e%2e/b", "%", "/a%2F..%2F..%2Fb?x#y", "", "a/b/../../..", "/a;x/..;/b", "/a%3B/b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		got := Normalize(raw)
		if !strings.HasPrefix(got, "/") {
			t.Fatalf("Normalize(%q) = %q: no leading /", raw, got)
		}
		if path.Clean(got) != got {
			t.Fatalf("Normalize(%q) = %q: not clean", raw, got)
		}
		if strings.Contains(got, ";") {
			t.Fatalf("Normalize(%q) = %q: path parameters left", raw, got)
		}
	})
}

func BenchmarkNormalize(b *testing.B) {
	for _, in := range []string{"/api/books/17", "/api//books/./%31%37?x=1"} {
		b.Run(in, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				Normalize(in)
			}
		})
	}
}
