package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/testkit/tlstest"
)

func TestLoadConsole(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := LoadConsole(mapEnv(map[string]string{"CONSOLE_ADMIN_TOKEN_FILE": tokenFile,
		"CONSOLE_ADMIN_URL": "http://limiter:8080/", "CONSOLE_SESSION_IDLE": "5m", "LOG_LEVEL": "debug"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.AdminToken != "0123456789abcdef0123456789abcdef" || c.AdminURL != "http://limiter:8080" ||
		c.SessionIdle != 5*time.Minute || c.SessionMax != 12*time.Hour || c.LogLevel != "debug" || c.ListenAddr != ":8085" {
		t.Fatalf("%+v", c)
	}
	c, err = LoadConsole(mapEnv(map[string]string{"CONSOLE_ADMIN_TOKEN_FILE": tokenFile,
		"CONSOLE_PUBLIC_URL": "https://Console.Example.com/", "CONSOLE_TRUSTED_PROXIES": "10.0.0.0/8, ::1"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.PublicURL != "https://console.example.com" || len(c.TrustedProxies) != 2 || c.TrustedProxies[0].String() != "10.0.0.0/8" {
		t.Fatalf("public URL %q, trusted proxies %v", c.PublicURL, c.TrustedProxies)
	}
}

func TestLoadConsoleErrorsNameTheVariable(t *testing.T) {
	short := filepath.Join(t.TempDir(), "short")
	if err := os.WriteFile(short, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, key := tlstest.NewCA(t, "console").Server("127.0.0.1")
	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"missing token file", map[string]string{"CONSOLE_ADMIN_TOKEN_FILE": "/nonexistent/token"}, "CONSOLE_ADMIN_TOKEN_FILE"},
		{"short token", map[string]string{"CONSOLE_ADMIN_TOKEN_FILE": short}, "CONSOLE_ADMIN_TOKEN_FILE"},
		{"admin url without scheme", map[string]string{"CONSOLE_ADMIN_URL": "limiter:8080"}, "CONSOLE_ADMIN_URL"},
		{"idle too short", map[string]string{"CONSOLE_SESSION_IDLE": "1s"}, "CONSOLE_SESSION_IDLE"},
		{"max below idle", map[string]string{"CONSOLE_SESSION_IDLE": "2h", "CONSOLE_SESSION_MAX": "1h"}, "CONSOLE_SESSION_MAX"},
		{"public url with a path", map[string]string{"CONSOLE_PUBLIC_URL": "https://example.com/console"}, "CONSOLE_PUBLIC_URL"},
		{"public url without scheme", map[string]string{"CONSOLE_PUBLIC_URL": "console.example.com"}, "CONSOLE_PUBLIC_URL"},
		{"bad proxies", map[string]string{"CONSOLE_TRUSTED_PROXIES": "10.0.0.0/33"}, "CONSOLE_TRUSTED_PROXIES"},
		{"http public url over TLS", map[string]string{"TLS_CERT_FILE": cert, "TLS_KEY_FILE": key,
			"CONSOLE_PUBLIC_URL": "http://console.example.com"}, "CONSOLE_PUBLIC_URL"},
		{"bad listen address", map[string]string{"LISTEN_ADDR": "nowhere"}, "LISTEN_ADDR"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadConsole(mapEnv(tt.env))
			if err == nil || !strings.HasPrefix(err.Error(), tt.want+":") {
				t.Fatalf("got %v, want an error naming %s", err, tt.want)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Fatalf("the error shows the token: %v", err)
			}
		})
	}
}
