package config

import (
	"crypto/tls"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"time"
)

// Console is the configuration of cmd/console, the security team's web
// console. Of Common it reads logging and shutdown only: it reads the
// archive from Postgres and the live state from the limiters' admin API,
// and uses no Redis and no Kafka.
type Console struct {
	Common
	ListenAddr string
	// OpsListenAddr, when set, serves /metrics and /readyz on a port of
	// their own; the pages' port then keeps /healthz only.
	OpsListenAddr string
	DatabaseURL   string
	// AdminURL is the base URL of a limiter's admin API (or of a load
	// balancer in front of the limiters).
	AdminURL string
	// AdminToken is the admin API's bearer token, read from
	// CONSOLE_ADMIN_TOKEN_FILE; "" when the variable is unset.
	AdminToken string
	// PrometheusURL is the base URL of a Prometheus scraping the limiters
	// and the detector: the rules' hits and the detector's lag; "": the
	// pages say how to show them.
	PrometheusURL string
	// UsersFile is the file of console users (name:role:bcrypt hash); the
	// console parses it at start.
	UsersFile string
	// SessionIdle ends a session unused this long; SessionMax ends any
	// session this long after its login.
	SessionIdle time.Duration
	SessionMax  time.Duration
	// Sessions bounds the sessions held at once.
	Sessions int
	// TLS serves the pages over HTTPS (TLS_CERT_FILE, TLS_KEY_FILE); nil:
	// plain HTTP, for a TLS proxy in front or loopback.
	TLS      *tls.Config
	TLSFiles TLSFiles
	// PublicURL is the console's origin as browsers see it through a proxy
	// (scheme://host[:port]); "": the request's Host.
	PublicURL string
	// TrustedProxies are the peers whose X-Forwarded-For and X-Real-IP
	// name the client of a login.
	TrustedProxies []netip.Prefix
}

// LoadConsole reads the console's configuration through getenv.
func LoadConsole(getenv func(string) string) (Console, error) {
	var c Console
	e := newEnv(ConsoleProcess, getenv)
	e.load(&dest{common: &c.Common, console: &c})
	c.TLS = e.serverTLS(c.TLSFiles)
	if c.SessionMax < c.SessionIdle {
		e.fail(e.name("CONSOLE_SESSION_MAX"), "a duration at least CONSOLE_SESSION_IDLE", c.SessionMax.String())
	}
	// Served over HTTPS, the browsers' Origin is https: an http public URL
	// would refuse every form, the login's included.
	if c.TLS != nil && strings.HasPrefix(c.PublicURL, "http://") {
		e.fail(e.name("CONSOLE_PUBLIC_URL"), "an https origin when TLS_CERT_FILE serves the console over HTTPS", c.PublicURL)
	}
	return c, e.err()
}

// consoleVars are the console's rows.
var consoleVars = []Var{
	{Name: "LISTEN_ADDR", Default: ":8085", Readers: consoleOnly,
		Meaning: "the console's pages and `/healthz`, `/readyz`, `/metrics` (put TLS in front, or keep it on loopback: its cookies are `Secure`)",
		load:    bind(inConsole(func(c *Console) *string { return &c.ListenAddr }), listenAddr)},
	{Name: "OPS_LISTEN_ADDR", Readers: consoleOnly,
		Meaning: "`host:port` of a listener of its own for `/metrics`, `/readyz` and `/healthz`, which then leave `LISTEN_ADDR` (but `/healthz`): expose the pages to the team's proxy only. Plain HTTP",
		load:    bind(inConsole(func(c *Console) *string { return &c.OpsListenAddr }), optionalListenAddr)},
	{Name: "DATABASE_URL", Default: DefaultDatabaseURL, Readers: consoleOnly,
		Meaning: "Postgres, the archive: every session takes the role `ratewarden_reader` (the archiver creates it), so log in with a member of it; and is read-only besides",
		load:    bind(inConsole(func(c *Console) *string { return &c.DatabaseURL }), text)},
	{Name: "CONSOLE_ADMIN_URL", Default: "http://127.0.0.1:8080", Readers: consoleOnly,
		Meaning: "base URL of a limiter's admin API (`/v1/admin/...`): the live bans and rules, and the console's actions",
		load:    bind(inConsole(func(c *Console) *string { return &c.AdminURL }), httpURL)},
	{Name: "CONSOLE_ADMIN_TOKEN_FILE", Readers: consoleOnly,
		Meaning: "file holding the limiters' `ADMIN_TOKEN` (one line, held to its rules); required",
		load:    bind(inConsole(func(c *Console) *string { return &c.AdminToken }), optional(tokenFile))},
	{Name: "CONSOLE_PROMETHEUS_URL", Readers: consoleOnly,
		Meaning: "base URL of a Prometheus scraping the limiters and the detector (`http://prometheus:9090`): the rules page shows each rule's hits and denials of the last day, the overview the detector's lag; unset: neither",
		load:    bind(inConsole(func(c *Console) *string { return &c.PrometheusURL }), optional(httpURL))},
	{Name: "CONSOLE_USERS_FILE", Readers: consoleOnly,
		Meaning: "file of console users, one `name:role:bcrypt-hash` a line, role `viewer` or `operator` (see [the console](console.md#users)); required",
		load:    bind(inConsole(func(c *Console) *string { return &c.UsersFile }), text)},
	{Name: "TLS_CERT_FILE", Readers: consoleOnly,
		Meaning: "PEM certificate (chain): `LISTEN_ADDR` serves the pages over HTTPS only (TLS 1.2+), and the session cookie takes the `__Host-` prefix. With `TLS_KEY_FILE`, both or neither",
		load:    bind(inConsole(func(c *Console) *string { return &c.TLSFiles.CertFile }), text)},
	{Name: "TLS_KEY_FILE", Readers: consoleOnly,
		Meaning: "PEM private key of `TLS_CERT_FILE`'s certificate",
		load:    bind(inConsole(func(c *Console) *string { return &c.TLSFiles.KeyFile }), text)},
	{Name: "CONSOLE_SESSION_IDLE", Default: "30m", Readers: consoleOnly,
		Meaning: "a session unused this long ends",
		load:    bind(inConsole(func(c *Console) *time.Duration { return &c.SessionIdle }), durationAtLeast(time.Minute, "30m or 1h"))},
	{Name: "CONSOLE_SESSION_MAX", Default: "12h", Readers: consoleOnly,
		Meaning: "any session ends this long after its login, used or not",
		load:    bind(inConsole(func(c *Console) *time.Duration { return &c.SessionMax }), durationAtLeast(time.Minute, "8h or 12h"))},
	{Name: "CONSOLE_MAX_SESSIONS", Default: "10000", Readers: consoleOnly,
		Meaning: "sessions held at once, 1 to 1 000 000; past it the least recently used ends. A user holds at most 10 (her 11th ends her oldest): keep it at 10 per user or more",
		load:    bind(inConsole(func(c *Console) *int { return &c.Sessions }), intBetween(1, 1_000_000))},
	{Name: "CONSOLE_PUBLIC_URL", Readers: consoleOnly,
		Meaning: "the console's origin as browsers reach it through a proxy, such as `https://console.example.com`: forms must come from it (the proxy may rewrite `Host`), and `https` gives the session cookie the `__Host-` prefix. Unset: forms must come from the request's `Host`",
		load:    bind(inConsole(func(c *Console) *string { return &c.PublicURL }), optional(publicOrigin))},
	{Name: "CONSOLE_TRUSTED_PROXIES", Readers: consoleOnly,
		Meaning: "IPs/CIDRs of the proxies in front of the console, whose `X-Forwarded-For` / `X-Real-IP` name the client that logins are throttled by; unset: the peer is the client (behind an untrusted proxy every client shares its throttle)",
		load:    bind(inConsole(func(c *Console) *[]netip.Prefix { return &c.TrustedProxies }), prefixes)},
}

// publicOrigin parses an http or https origin: a scheme and a host, no
// path (the console is served from the root: its cookies' path is /).
func publicOrigin(v string) (string, error) {
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") ||
		u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return v, expected("an origin such as https://console.example.com", v)
	}
	return u.Scheme + "://" + strings.ToLower(u.Host), nil
}

// httpURL parses an http or https base URL with a host.
func httpURL(v string) (string, error) {
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return v, expected("an http(s) base URL such as http://127.0.0.1:8080", v)
	}
	return strings.TrimSuffix(v, "/"), nil
}

// tokenFile reads a bearer token from a file (surrounding spaces and the
// final newline dropped), held to the rules of ADMIN_TOKEN. Errors never
// show the token.
func tokenFile(path string) (string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read the token: %w", err)
	}
	token := strings.TrimSpace(string(raw))
	if strings.ContainsAny(token, "\r\n") {
		return "", fmt.Errorf("%s: expected one line", path)
	}
	if _, err := adminToken(token); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return token, nil
}
