package e2e

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/kafkatest"
	"github.com/ratewarden/ratewarden/internal/testkit/tlstest"
)

// Two API tokens, as during a rotation.
const (
	apiTokenOld = "old-api-token-0123456789abcdef"
	apiTokenNew = "new-api-token-fedcba9876543210"
)

// call sends a decision request to base+path with the Authorization header
// auth (none when empty) and returns the status and body.
func call(t *testing.T, c *http.Client, method, url, auth, body string, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

// With API_TOKENS, the real limiter decides /v1/check and /v1/auth only for
// a caller with one of the tokens: either token of a rotation works, and no
// token, a wrong one or a prefix of a right one gets 401.
func TestDecisionsNeedAToken(t *testing.T) {
	e := newEnv(t)
	lim := e.start("limiter", "API_TOKENS", apiTokenOld+","+apiTokenNew)
	base := "http://" + lim.addr
	c := &http.Client{Timeout: 10 * time.Second}
	defer c.CloseIdleConnections()
	routes := []struct {
		name, method, path, body string
		header                   []string
	}{
		{"check", "POST", "/v1/check", `{"ip":"198.51.100.1","endpoint":"/api/a"}`, nil},
		{"forward auth", "GET", "/v1/auth", "", []string{"X-Forwarded-Uri", "/api/a"}},
		{"forward auth with a path", "GET", "/v1/auth/api/a", "", nil},
	}
	for _, r := range routes {
		for _, tt := range []struct {
			name, auth string
			want       int
		}{
			{"no token", "", 401},
			{"wrong token", "Bearer wrong-api-token-0123456789ab", 401},
			{"short prefix of a token", "Bearer " + apiTokenNew[:8], 401},
			{"admin token", "Bearer " + adminToken, 401},
			{"token as basic credentials", "Basic " + apiTokenNew, 401},
			{"old token", "Bearer " + apiTokenOld, 200},
			{"new token", "Bearer " + apiTokenNew, 200},
		} {
			t.Run(r.name+"/"+tt.name, func(t *testing.T) {
				status, body := call(t, c, r.method, base+r.path, tt.auth, r.body, r.header...)
				if status != tt.want {
					t.Fatalf("%d %s, want %d", status, body, tt.want)
				}
				if status == 200 && !strings.Contains(body, `"reason":"ok"`) {
					t.Fatalf("no decision: %s", body)
				}
			})
		}
	}
}

// The ban injection of the hardening issue: 60 checks naming a victim's IP
// and 60 endpoints within seconds would have the detector ban the victim.
// Without a token every one is refused, so nothing reaches the detector;
// the same checks with a token (a control) do get their subject banned.
func TestBanInjectionNeedsAToken(t *testing.T) {
	e := newEnv(t)
	e.start("detector")
	lim := e.start("limiter", "API_TOKENS", apiTokenNew)
	c := &http.Client{Timeout: 10 * time.Second}
	defer c.CloseIdleConnections()
	const victim, control = "203.0.113.77", "203.0.113.78"
	scan := func(ip, auth string) (statuses map[int]int) {
		statuses = map[int]int{}
		for i := range 60 {
			status, _ := call(t, c, "POST", "http://"+lim.addr+"/v1/check", auth,
				fmt.Sprintf(`{"ip":%q,"endpoint":"/api/scan/%d"}`, ip, i))
			statuses[status]++
		}
		return statuses
	}
	if got := scan(victim, ""); got[401] != 60 {
		t.Fatalf("unauthenticated scan naming the victim: statuses %v, want 60 × 401", got)
	}
	if got := scan(control, "Bearer "+apiTokenNew); got[200] != 60 {
		t.Fatalf("authenticated scan: statuses %v, want 60 × 200", got)
	}
	reason := func(ip string) string {
		_, body := call(t, c, "POST", "http://"+lim.addr+"/v1/check", "Bearer "+apiTokenNew, fmt.Sprintf(`{"ip":%q,"endpoint":"/api/books/1"}`, ip))
		var d struct{ Reason string }
		_ = json.Unmarshal([]byte(body), &d)
		return d.Reason
	}
	testkit.WaitFor(t, 30*time.Second, "the control scanner's ban", func() bool { return reason(control) == event.ReasonBanned })
	if r := reason(victim); r != event.ReasonOK {
		t.Fatalf("victim: %s, want ok", r)
	}
	n := kafkatest.CountMessages(t, e.broker.Brokers(), decisionsTopic)
	for _, m := range kafkatest.ReadMessages(t, e.broker.Brokers(), decisionsTopic, int(n), 15*time.Second) {
		if d, err := event.DecodeDecision(m.Value); err == nil && d.IP == victim && d.Endpoint != "/api/books/1" {
			t.Fatalf("a refused check reached the decision stream: %s", m.Value)
		}
	}
	for _, b := range bans(t, e, int(kafkatest.CountMessages(t, e.broker.Brokers(), bansTopic))) {
		if b.Subject == victim {
			t.Fatalf("victim banned: %+v", b)
		}
	}
}

// tlsClient trusts ca and presents cert when it has one, even to a server
// that names other authorities (Go's client would otherwise send none).
func tlsClient(ca *tlstest.CA, cert *tls.Certificate) *http.Client {
	cfg := &tls.Config{RootCAs: ca.Pool()}
	if cert != nil {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
}

const checkBody = `{"ip":"198.51.100.9","endpoint":"/api/a"}`

// TLS on the decision listener: a client trusting the certificate's
// authority gets decisions; a plain-HTTP client and a client trusting
// another authority get none. With TLS_CLIENT_CA_FILE, a client without a
// certificate, or with one of another authority, fails the handshake; one
// with a certificate of the client authority gets decisions.
func TestDecisionListenerTLS(t *testing.T) {
	serverCA, clientCA, otherCA := tlstest.NewCA(t, "server"), tlstest.NewCA(t, "clients"), tlstest.NewCA(t, "other")
	cert, key := serverCA.Server("127.0.0.1")
	gateway, stranger := clientCA.Client("gateway"), otherCA.Client("stranger")
	e := newEnv(t)
	tests := []struct {
		name    string
		extra   []string
		client  *http.Client
		decides bool
	}{
		{"trusting client", nil, tlsClient(serverCA, nil), true},
		{"client trusting another authority", nil, tlsClient(otherCA, nil), false},
		{"mTLS: client certificate", []string{"TLS_CLIENT_CA_FILE", clientCA.File()}, tlsClient(serverCA, &gateway), true},
		{"mTLS: no client certificate", []string{"TLS_CLIENT_CA_FILE", clientCA.File()}, tlsClient(serverCA, nil), false},
		{"mTLS: certificate of another authority", []string{"TLS_CLIENT_CA_FILE", clientCA.File()}, tlsClient(serverCA, &stranger), false},
	}
	limiters := map[bool]*proc{}
	for _, mutual := range []bool{false, true} {
		extra := []string{"TLS_CERT_FILE", cert, "TLS_KEY_FILE", key, "OPS_LISTEN_ADDR", "127.0.0.1:0"}
		if mutual {
			extra = append(extra, "TLS_CLIENT_CA_FILE", clientCA.File())
		}
		limiters[mutual] = e.start("limiter", extra...)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer tt.client.CloseIdleConnections()
			lim := limiters[len(tt.extra) > 0]
			resp, err := tt.client.Post("https://"+lim.addr+"/v1/check", "application/json", strings.NewReader(checkBody))
			if !tt.decides {
				if err == nil {
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					t.Fatalf("answered %d %s, want a failed handshake", resp.StatusCode, body)
				}
				t.Logf("refused: %v", err)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || !strings.Contains(string(body), `"reason":"ok"`) {
				t.Fatalf("%d %s, want a decision", resp.StatusCode, body)
			}
		})
	}
	// Plain HTTP fails the TLS handshake: the connection is closed without
	// an answer (or, from a server that recognizes it, answered with an
	// error), never with a decision.
	t.Run("plain HTTP", func(t *testing.T) {
		resp, err := http.Post("http://"+limiters[false].addr+"/v1/check", "application/json", strings.NewReader(checkBody))
		if err != nil {
			t.Logf("plain HTTP: %v", err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 || strings.Contains(string(body), `"allowed"`) {
			t.Fatalf("plain HTTP got a decision: %d %s", resp.StatusCode, body)
		}
		t.Logf("plain HTTP: %d %q", resp.StatusCode, body)
	})
}

// With OPS_LISTEN_ADDR the decision port serves the decision API (and
// /healthz, for gateways' health checks) and the operational routes move to
// the ops port.
func TestOpsListener(t *testing.T) {
	e := newEnv(t)
	lim := e.start("limiter", "OPS_LISTEN_ADDR", "127.0.0.1:0")
	if lim.opsAddr == "" || lim.opsAddr == lim.addr {
		t.Fatalf("ops address %q, decision address %q", lim.opsAddr, lim.addr)
	}
	tests := []struct {
		name, addr, method, path string
		want                     int
		bodyHas                  string
	}{
		{"metrics off the decision port", lim.addr, "GET", "/metrics", 404, ""},
		{"readyz off the decision port", lim.addr, "GET", "/readyz", 404, ""},
		{"profiles off the decision port", lim.addr, "GET", "/debug/pprof/", 404, ""},
		{"healthz on the decision port", lim.addr, "GET", "/healthz", 200, `"ok"`},
		{"decisions on the decision port", lim.addr, "POST", "/v1/check", 200, `"reason":"ok"`},
		{"metrics on the ops port", lim.opsAddr, "GET", "/metrics", 200, "rate_limit_requests_total"},
		{"readyz on the ops port", lim.opsAddr, "GET", "/readyz", 200, `"mode":"redis"`},
		{"healthz on the ops port", lim.opsAddr, "GET", "/healthz", 200, `"ok"`},
		{"profiles on the ops port", lim.opsAddr, "GET", "/debug/pprof/cmdline", 200, "limiter"},
		{"no decisions on the ops port", lim.opsAddr, "POST", "/v1/check", 404, ""},
		{"no admin API on the ops port", lim.opsAddr, "GET", "/v1/admin/bans", 404, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := call(t, http.DefaultClient, tt.method, "http://"+tt.addr+tt.path, "", checkBody)
			if status != tt.want || !strings.Contains(body, tt.bodyHas) {
				t.Fatalf("%d %.200s, want %d with %q", status, body, tt.want, tt.bodyHas)
			}
		})
	}
}

// A token under 16 bytes or a placeholder of the deployment files in
// API_TOKENS or ADMIN_TOKEN stops the limiter at start, before it listens,
// with one line naming the variable.
func TestStartRefusesWeakTokens(t *testing.T) {
	e := newEnv(t)
	tests := []struct{ name, key, value string }{
		{"10-byte API token", "API_TOKENS", "0123456789"},
		{"API token placeholder of compose", "API_TOKENS", "change-me-api-token"},
		{"API token placeholder of Kubernetes", "API_TOKENS", "REPLACE-ME-with-openssl-rand-hex-32"},
		{"10-byte admin token", "ADMIN_TOKEN", "0123456789"},
		{"admin token placeholder of compose", "ADMIN_TOKEN", "change-me-admin-token"},
		{"admin token placeholder of Kubernetes", "ADMIN_TOKEN", "REPLACE-ME-with-openssl-rand-hex-32"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vars := map[string]string{}
			for k, v := range e.vars {
				vars[k] = v
			}
			vars[tt.key] = tt.value
			p := launch(t, "limiter", vars)
			select {
			case <-p.done:
			case <-time.After(15 * time.Second):
				t.Fatalf("still running with %s=%s:\n%s", tt.key, tt.value, p.out)
			}
			out := strings.TrimSpace(p.out.String())
			if code := p.cmd.ProcessState.ExitCode(); code != 1 || !strings.HasPrefix(out, "limiter: "+tt.key+": ") ||
				strings.Contains(out, "\n") || strings.Contains(out, tt.value) {
				t.Fatalf("exit code %d, output %q; want 1 and one line naming %s without the token", code, out, tt.key)
			}
		})
	}
}
