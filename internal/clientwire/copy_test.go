package clientwire_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The client module has copies of the limiter's packages it needs (it
// cannot import them): they stay the limiter's code, line for line, but
// for their package comment and the import path of each other. So the
// limiter's tests of those packages are theirs too: the copies carry none.
func TestClientCopiesAreTheLimiters(t *testing.T) {
	for _, f := range []string{"jsonwire/append.go", "jsonwire/parse.go", "clientaddr/clientaddr.go", "ipprefix/ipprefix.go", "endpoint/normalize.go"} {
		mine := code(t, filepath.Join("..", "..", "client", "internal", f))
		theirs := code(t, filepath.Join("..", f))
		theirs = strings.ReplaceAll(theirs, `"github.com/ratewarden/ratewarden/internal/`, `"github.com/ratewarden/ratewarden/client/internal/`)
		if mine != theirs {
			t.Errorf("client/internal/%s is not internal/%s: copy it again (cp, then fix its package comment and imports)", f, f)
		}
	}
}

// code is a Go file's text from its package clause on.
func code(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if i := strings.Index(s, "\npackage "); i >= 0 && !strings.HasPrefix(s, "package ") {
		s = s[i+1:]
	}
	return s
}
