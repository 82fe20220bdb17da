package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The console's happy path runs in internal/app/console's tests; here, a
// bad configuration stops it at start with the variable named.
func TestRunRefusesBadConfiguration(t *testing.T) {
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	users := filepath.Join(dir, "users")
	badUsers := filepath.Join(dir, "bad-users")
	for file, content := range map[string]string{token: "0123456789abcdef0123456789abcdef\n",
		users:    "ana:operator:$2y$05$1NbIsx9bxUrZ5x9Y8FFZ0u6P1CjTcETbOoWHyrntb5XArq/D7GS.W\n",
		badUsers: "ana:admin:$2y$05$1NbIsx9bxUrZ5x9Y8FFZ0u6P1CjTcETbOoWHyrntb5XArq/D7GS.W\n"} {
		if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"no users file", map[string]string{"CONSOLE_ADMIN_TOKEN_FILE": token}, "CONSOLE_USERS_FILE"},
		{"a bad role", map[string]string{"CONSOLE_ADMIN_TOKEN_FILE": token, "CONSOLE_USERS_FILE": badUsers}, "CONSOLE_USERS_FILE"},
		{"no token file", map[string]string{"CONSOLE_USERS_FILE": users}, "CONSOLE_ADMIN_TOKEN_FILE"},
		{"bad session idle", map[string]string{"CONSOLE_SESSION_IDLE": "soon"}, "CONSOLE_SESSION_IDLE"},
		{"unreachable database", map[string]string{"CONSOLE_ADMIN_TOKEN_FILE": token, "CONSOLE_USERS_FILE": users,
			"DATABASE_URL": "postgres://postgres@127.0.0.1:1/x?sslmode=disable&connect_timeout=2"}, "DATABASE_URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := run(context.Background(), nil, func(k string) string { return tt.env[k] }, io.Discard)
			if err == nil || !strings.HasPrefix(err.Error(), tt.want+":") || strings.Contains(err.Error(), "\n") {
				t.Fatalf("got %v, want one line naming %s", err, tt.want)
			}
		})
	}
	if err := run(context.Background(), []string{"extra"}, func(string) string { return "" }, io.Discard); err == nil {
		t.Fatal("unexpected arguments accepted")
	}
}
