package console

import (
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"
)

// htpasswdHash is a hash in the form `htpasswd -nbB` writes: bcrypt's
// $2y$ variant (the same algorithm as Go's $2a$).
const htpasswdHash = "$2y$05$GsBd3Qbcm5MEg4ikeQwiX.3CXU7rZ2SuhU6hxbJjxXnrlG8T8HO6."

func TestParseUsers(t *testing.T) {
	hash := func(password string) string {
		h, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		return string(h)
	}
	apache := "$2y$" + strings.TrimPrefix(hash("secret"), "$2a$")
	users, err := ParseUsers(strings.NewReader("# console users\n\nana:operator:" + apache + "\nvic:viewer:" + hash("pw-of-vic") + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if u, ok := users.Authenticate("ana", "secret"); !ok || u.Role != Operator {
		t.Fatalf("ana with her password (an htpasswd $2y$ hash): %+v %v", u, ok)
	}
	if u, ok := users.Authenticate("vic", "pw-of-vic"); !ok || u.Role != Viewer {
		t.Fatalf("vic: %+v %v", u, ok)
	}
	for _, c := range [][2]string{{"ana", "wrong"}, {"vic", "secret"}, {"nobody", "secret"}, {"", ""}} {
		if _, ok := users.Authenticate(c[0], c[1]); ok {
			t.Errorf("%q with %q admitted", c[0], c[1])
		}
	}
}

func TestParseUsersRefuses(t *testing.T) {
	tests := []struct{ name, file, want string }{
		{"empty", "# nobody\n", "no users"},
		{"no role", "ana:" + htpasswdHash + "\n", "line 1"},
		{"unknown role", "ana:admin:" + htpasswdHash + "\n", `role "admin"`},
		{"plain password", "ana:viewer:secret\n", "bcrypt"},
		{"twice", "ana:viewer:" + htpasswdHash + "\nana:operator:" + htpasswdHash + "\n", "line 2"},
		{"space in name", "a na:viewer:" + htpasswdHash + "\n", "name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseUsers(strings.NewReader(tt.file))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error with %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "$2y$") || strings.Contains(err.Error(), "secret") {
				t.Fatalf("the error shows a secret: %v", err)
			}
		})
	}
}
