package config

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ratewarden/ratewarden/internal/testkit/tlstest"
)

const (
	tokenA = "0123456789abcdef0123456789abcdef"
	tokenB = "fedcba9876543210fedcba9876543210"
)

func TestAPITokens(t *testing.T) {
	c, err := LoadLimiter(mapEnv(map[string]string{"API_TOKENS": tokenA + ", " + tokenB, "ADMIN_TOKEN": "admin-" + tokenA}))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.APITokens, []string{tokenA, tokenB}) || c.AdminToken != "admin-"+tokenA {
		t.Fatalf("API tokens %q, admin token %q", c.APITokens, c.AdminToken)
	}
	if c, err := LoadLimiter(mapEnv(nil)); err != nil || c.APITokens != nil || c.AdminToken != "" {
		t.Fatalf("tokens are off by default: %q %q %v", c.APITokens, c.AdminToken, err)
	}
}

// A token that is short, a placeholder of the deployment files or not
// printable ASCII stops the start, with one line naming the variable and
// never showing the token.
func TestTokensRefused(t *testing.T) {
	tests := []struct{ name, key, value, why string }{
		{"10-byte API token", "API_TOKENS", "0123456789", "10 bytes, expected at least 16"},
		{"second API token short", "API_TOKENS", tokenA + ",short-token", "token 2 of 2 is 11 bytes"},
		{"compose API placeholder", "API_TOKENS", "change-me-api-token", "placeholder"},
		{"kubernetes API placeholder", "API_TOKENS", "REPLACE-ME-with-openssl-rand-hex-32", "placeholder"},
		{"10-byte admin token", "ADMIN_TOKEN", "0123456789", "10 bytes"},
		{"compose admin placeholder", "ADMIN_TOKEN", "change-me-admin-token", "placeholder"},
		{"kubernetes admin placeholder", "ADMIN_TOKEN", "REPLACE-ME-with-openssl-rand-hex-32", "placeholder"},
		{"admin token list", "ADMIN_TOKEN", tokenA + "," + tokenB, "one token"},
		{"non-ASCII token", "API_TOKENS", tokenA + "é", "printable ASCII"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadLimiter(mapEnv(map[string]string{tt.key: tt.value}))
			if err == nil || !strings.HasPrefix(err.Error(), tt.key+": ") || !strings.Contains(err.Error(), tt.why) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("want one line naming %s and saying %q, got %v", tt.key, tt.why, err)
			}
			for _, secret := range strings.Split(tt.value, ",") {
				if strings.Contains(err.Error(), secret) {
					t.Fatalf("the error shows the token: %v", err)
				}
			}
		})
	}
}

func TestOpsListenAddr(t *testing.T) {
	c, err := LoadLimiter(mapEnv(map[string]string{"OPS_LISTEN_ADDR": ":9090"}))
	if err != nil || c.OpsListenAddr != ":9090" {
		t.Fatalf("OPS_LISTEN_ADDR: %q %v", c.OpsListenAddr, err)
	}
	if _, err := LoadLimiter(mapEnv(map[string]string{"LISTEN_ADDR": "127.0.0.1:0", "OPS_LISTEN_ADDR": "127.0.0.1:0"})); err != nil {
		t.Fatalf("two listeners on free ports: %v", err)
	}
	for _, env := range []map[string]string{
		{"OPS_LISTEN_ADDR": "9090"},
		{"OPS_LISTEN_ADDR": ":8080"}, // LISTEN_ADDR's default
		{"OPS_LISTEN_ADDR": "127.0.0.1:6060", "PPROF_ADDR": "127.0.0.1:6060"},
	} {
		if _, err := LoadLimiter(mapEnv(env)); err == nil || !strings.Contains(err.Error(), "OPS_LISTEN_ADDR") {
			t.Errorf("%v: %v, want an error naming OPS_LISTEN_ADDR", env, err)
		}
	}
}

func TestTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "config")
	cert, key := ca.Server("127.0.0.1")
	c, err := LoadLimiter(mapEnv(map[string]string{"TLS_CERT_FILE": cert, "TLS_KEY_FILE": key}))
	if err != nil || c.TLS == nil || len(c.TLS.Certificates) != 1 || c.TLS.ClientAuth != tls.NoClientCert {
		t.Fatalf("TLS without client certificates: %+v %v", c.TLS, err)
	}
	c, err = LoadLimiter(mapEnv(map[string]string{"TLS_CERT_FILE": cert, "TLS_KEY_FILE": key, "TLS_CLIENT_CA_FILE": ca.File()}))
	if err != nil || c.TLS == nil || c.TLS.ClientAuth != tls.RequireAndVerifyClientCert || c.TLS.ClientCAs == nil {
		t.Fatalf("TLS with client certificates: %+v %v", c.TLS, err)
	}
	if c, err := LoadLimiter(mapEnv(nil)); err != nil || c.TLS != nil {
		t.Fatalf("TLS is off by default: %+v %v", c.TLS, err)
	}
}

func TestTLSRefused(t *testing.T) {
	ca := tlstest.NewCA(t, "config")
	cert, key := ca.Server("127.0.0.1")
	_, otherKey := tlstest.NewCA(t, "other").Server("127.0.0.1")
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "missing.pem")
	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"certificate without key", map[string]string{"TLS_CERT_FILE": cert}, "TLS_KEY_FILE: required"},
		{"key without certificate", map[string]string{"TLS_KEY_FILE": key}, "TLS_CERT_FILE: required"},
		{"client CA without TLS", map[string]string{"TLS_CLIENT_CA_FILE": ca.File()}, "TLS_CLIENT_CA_FILE"},
		{"missing certificate", map[string]string{"TLS_CERT_FILE": missing, "TLS_KEY_FILE": key}, "TLS_CERT_FILE: open"},
		{"unreadable key", map[string]string{"TLS_CERT_FILE": cert, "TLS_KEY_FILE": missing}, "TLS_KEY_FILE: open"},
		{"key of another certificate", map[string]string{"TLS_CERT_FILE": cert, "TLS_KEY_FILE": otherKey}, "TLS_CERT_FILE and TLS_KEY_FILE"},
		{"certificate not PEM", map[string]string{"TLS_CERT_FILE": notPEM, "TLS_KEY_FILE": key}, "TLS_CERT_FILE and TLS_KEY_FILE"},
		{"client CA not PEM", map[string]string{"TLS_CERT_FILE": cert, "TLS_KEY_FILE": key, "TLS_CLIENT_CA_FILE": notPEM}, "TLS_CLIENT_CA_FILE"},
		{"client CA missing", map[string]string{"TLS_CERT_FILE": cert, "TLS_KEY_FILE": key, "TLS_CLIENT_CA_FILE": missing}, "TLS_CLIENT_CA_FILE: open"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadLimiter(mapEnv(tt.env))
			if err == nil || !strings.HasPrefix(err.Error(), strings.Fields(tt.want)[0]) || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("want one line with %q, got %v", tt.want, err)
			}
		})
	}
}
