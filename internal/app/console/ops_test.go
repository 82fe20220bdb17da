package console

import (
	"context"
	"crypto/tls"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/config"
	"github.com/ratewarden/ratewarden/internal/pgstore"
	"github.com/ratewarden/ratewarden/internal/testkit/pgtest"
	"github.com/ratewarden/ratewarden/internal/testkit/tlstest"
)

// consoleEnv makes a migrated database, a token and a users file, and
// returns the console's environment with them.
func consoleEnv(t *testing.T) map[string]string {
	t.Helper()
	db := pgtest.Database(t)
	store, err := pgstore.OpenMigrated(context.Background(), db, nil) // the schema and the reader role
	if err != nil {
		t.Fatal(err)
	}
	store.Close()
	dir := t.TempDir()
	for name, content := range map[string]string{"token": adminToken + "\n", "users": usersFile(t)} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return map[string]string{"LISTEN_ADDR": "127.0.0.1:0", "DATABASE_URL": db,
		"CONSOLE_ADMIN_TOKEN_FILE": filepath.Join(dir, "token"), "CONSOLE_USERS_FILE": filepath.Join(dir, "users")}
}

// Served over TLS (TLS_CERT_FILE, TLS_KEY_FILE), the console's cookies take
// the __Host- prefix; plain HTTP is refused.
func TestTLSHostCookies(t *testing.T) {
	env := consoleEnv(t)
	ca := tlstest.NewCA(t, "console-test")
	env["TLS_CERT_FILE"], env["TLS_KEY_FILE"] = ca.Server("127.0.0.1")
	cfg := must(config.LoadConsole(func(k string) string { return env[k] }))(t)
	a := must(New(context.Background(), cfg, Deps{Log: zap.NewNop(), Registry: prometheus.NewRegistry()}))(t)
	run(t, "console", a.Run, a.Addr)

	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
	resp, err := client.Get("https://" + a.Addr() + "/login")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cookies := resp.Cookies()
	if len(cookies) != 1 || !strings.HasPrefix(cookies[0].Name, "__Host-") || !cookies[0].Secure || cookies[0].Path != "/" || cookies[0].Domain != "" {
		t.Fatalf("cookies over TLS: %+v", cookies)
	}
	if resp, err := http.Get("http://" + a.Addr() + "/login"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("plain HTTP served the login page")
		}
	}
}

// With OPS_LISTEN_ADDR, /metrics and /readyz leave the pages' port for a
// port of their own; /healthz answers on both.
func TestOperationalRoutesOnTheirOwnPort(t *testing.T) {
	env := consoleEnv(t)
	env["OPS_LISTEN_ADDR"] = "127.0.0.1:0"
	cfg := must(config.LoadConsole(func(k string) string { return env[k] }))(t)
	a := must(New(context.Background(), cfg, Deps{Log: zap.NewNop(), Registry: prometheus.NewRegistry()}))(t)
	run(t, "console", a.Run, a.Addr) // the pages start after the ops listener

	status := func(addr, path string) int {
		t.Helper()
		client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := client.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tt := range []struct {
		addr, path string
		want       int
	}{
		{a.OpsAddr(), "/metrics", http.StatusOK}, {a.OpsAddr(), "/readyz", http.StatusOK}, {a.OpsAddr(), "/healthz", http.StatusOK},
		{a.Addr(), "/healthz", http.StatusOK}, {a.Addr(), "/login", http.StatusOK},
		{a.Addr(), "/metrics", http.StatusSeeOther}, {a.Addr(), "/readyz", http.StatusSeeOther}, // pages: log in first
	} {
		if got := status(tt.addr, tt.path); got != tt.want {
			t.Errorf("%s%s: %d, want %d", tt.addr, tt.path, got, tt.want)
		}
	}
}
