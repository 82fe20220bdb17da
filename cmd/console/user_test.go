package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/ratewarden/ratewarden/internal/console"
)

// console user writes a line the console reads back, and refuses a bad
// role or an empty password.
func TestUserLine(t *testing.T) {
	var out bytes.Buffer
	if err := userLine([]string{"ana", "operator"}, strings.NewReader("her password\n"), &out); err != nil {
		t.Fatal(err)
	}
	users, err := console.ParseUsers(&out)
	if err != nil {
		t.Fatal(err)
	}
	if u, ok := users.Authenticate("ana", "her password"); !ok || u.Role != console.Operator {
		t.Fatalf("the line written does not admit ana with her password: %+v %v", u, ok)
	}
	for _, tt := range []struct {
		args  []string
		input string
	}{{[]string{"ana", "admin"}, "pw\n"}, {[]string{"ana", "viewer"}, "\n"}, {[]string{"ana"}, "pw\n"}, {[]string{"a b", "viewer"}, "pw\n"}} {
		if err := userLine(tt.args, strings.NewReader(tt.input), new(bytes.Buffer)); err == nil {
			t.Errorf("%q with %q accepted", tt.args, tt.input)
		}
	}
}
