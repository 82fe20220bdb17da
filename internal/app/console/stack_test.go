package console

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"golang.org/x/crypto/bcrypt"

	archiverapp "github.com/ratewarden/ratewarden/internal/app/archiver"
	detectorapp "github.com/ratewarden/ratewarden/internal/app/detector"
	limiterapp "github.com/ratewarden/ratewarden/internal/app/limiter"
	"github.com/ratewarden/ratewarden/internal/config"
	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/kafkatest"
	"github.com/ratewarden/ratewarden/internal/testkit/pgtest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

const (
	decisionsTopic, bansTopic, outcomesTopic = "decisions", "bans", "outcomes"
	adminToken                               = "console-test-admin-token-0123456789"
	// rulesYAML admits 3 requests a second per address on /api/, and bans
	// an address after 5 violations.
	rulesYAML = `
rules:
  - id: api-per-ip
    match: {endpoints: ["/api/**"]}
    key: [ip]
    algorithm: fixed_window
    limits: [{requests: 3, per: 1s}]
detection:
  ban: [{violations: 5, within: 1h, duration: 1h}]
  samples: 5
`
)

// The console's users in the tests, with their passwords.
var testUsers = []struct{ name, role, password string }{
	{"ana", "operator", "ana-password"},
	{"vic", "viewer", "vic-password"},
}

// stack is the real services on the test's Redis, Postgres and an embedded
// broker: a limiter (its admin API), a detector, an archiver and the
// console, each assembled as its command assembles it.
type stack struct {
	limiter, console string // base URLs
	prometheus       string // base URL; "" without one
	db               string
}

// startStack starts the services and waits for their listeners; they stop
// when the test ends.
func startStack(t *testing.T) *stack {
	t.Helper()
	return launchStack(t, false)
}

// startStackWithPrometheus is startStack with a Prometheus scraping the
// limiter and the detector, the console's CONSOLE_PROMETHEUS_URL.
func startStackWithPrometheus(t *testing.T) *stack {
	t.Helper()
	return launchStack(t, true)
}

func launchStack(t *testing.T, withPrometheus bool) *stack {
	t.Helper()
	broker := kafkatest.StartBroker(t, decisionsTopic, bansTopic, outcomesTopic)
	db := pgtest.Database(t)
	prefix := redistest.Prefix(t, redistest.Client(t))
	dir := t.TempDir()
	files := map[string]string{"rules.yaml": rulesYAML, "token": adminToken + "\n", "users": usersFile(t)}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{
		"KAFKA_BROKERS": broker.Addr(), "REDIS_URL": redistest.RequiredURL(t), "REDIS_KEY_PREFIX": prefix,
		"DECISIONS_TOPIC": decisionsTopic, "BANS_TOPIC": bansTopic, "OUTCOMES_TOPIC": outcomesTopic,
		"LISTEN_ADDR": "127.0.0.1:0", "RULES_FILE": filepath.Join(dir, "rules.yaml"), "DATABASE_URL": db,
		"GRPC_LISTEN_ADDR": "off", "ADMIN_TOKEN": adminToken, "INSTANCE_ID": "limiter-1",
		// A loaded machine's slow round trip must not count as Redis down,
		// which a local rule answers with a refusal.
		"REDIS_TIMEOUT":     "2s",
		"DETECTOR_GROUP_ID": "detector-" + uuid.NewString(), "DETECTOR_BATCH_WAIT": "20ms",
		"ARCHIVER_GROUP_ID": "archiver-" + uuid.NewString(), "ARCHIVER_FLUSH_INTERVAL": "100ms",
		"CONSOLE_ADMIN_TOKEN_FILE": filepath.Join(dir, "token"), "CONSOLE_USERS_FILE": filepath.Join(dir, "users"),
	}
	getenv := func(k string) string { return env[k] }
	s := &stack{db: db}

	// The archiver first: it makes the schema (and the reader role) the
	// limiter's dynamic rules and the console read.
	archiverCfg := must(config.LoadArchiver(getenv))(t)
	archiver := must(archiverapp.New(context.Background(), archiverCfg, archiverapp.Deps{Log: zap.NewNop(), Registry: prometheus.NewRegistry()}))(t)
	run(t, "archiver", archiver.Run, archiver.Addr)

	limiter := must(limiterapp.New(must(config.LoadLimiter(getenv))(t), limiterapp.Deps{Log: zap.NewNop(), Registry: prometheus.NewRegistry()}))(t)
	run(t, "limiter", limiter.Run, func() string { return limiter.Addrs().Decisions })
	s.limiter = "http://" + limiter.Addrs().Decisions

	detector := must(detectorapp.New(must(config.LoadDetector(getenv))(t), detectorapp.Deps{Log: zap.NewNop(), Registry: prometheus.NewRegistry()}))(t)
	run(t, "detector", detector.Run, detector.Addr)
	if withPrometheus {
		s.prometheus = startPrometheus(t, limiter.Addrs().Decisions, detector.Addr())
		env["CONSOLE_PROMETHEUS_URL"] = s.prometheus
	}

	env["DATABASE_URL"] = readerURL(t, db)
	consoleCfg := must(config.LoadConsole(getenv))(t)
	consoleCfg.AdminURL = s.limiter
	c := must(New(context.Background(), consoleCfg, Deps{Log: zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)), Registry: prometheus.NewRegistry()}))(t)
	run(t, "console", c.Run, c.Addr)
	// localhost, not 127.0.0.1: browsers keep the console's Secure cookies
	// over plain HTTP on localhost only.
	s.console = "http://localhost:" + port(t, c.Addr())
	return s
}

// port is the port of addr.
func port(t testing.TB, addr string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// must returns a function that fails the test on err, else returns v.
func must[T any](v T, err error) func(testing.TB) T {
	return func(tb testing.TB) T {
		tb.Helper()
		if err != nil {
			tb.Fatal(err)
		}
		return v
	}
}

// run runs a service until the test ends, and waits for its address.
func run(t testing.TB, name string, runFn func(context.Context) error, addr func() string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runFn(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("%s did not stop within 30s", name)
		}
	})
	testkit.WaitFor(t, 30*time.Second, "the "+name+"'s listener", func() bool { return addr() != "" })
}

// usersFile is the users file of testUsers, with bcrypt's cheapest cost.
func usersFile(t testing.TB) string {
	var b strings.Builder
	for _, u := range testUsers {
		hash, err := bcrypt.GenerateFromPassword([]byte(u.password), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s:%s:%s\n", u.name, u.role, hash)
	}
	return b.String()
}

// readerURL creates a login role in ratewarden_reader, the archiver's
// read-only role, and returns db's URL with it as the user: the console
// reads as a deployment would. The role is dropped when the test ends.
func readerURL(t testing.TB, db string) string {
	t.Helper()
	raw := make([]byte, 6)
	_, _ = rand.Read(raw)
	role := "rwtest_console_" + hex.EncodeToString(raw)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE ROLE "+role+" LOGIN IN ROLE ratewarden_reader"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), pgtest.ServerURL())
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(context.Background(), "DROP ROLE IF EXISTS "+role); err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
	})
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	return u.String()
}

// check asks the limiter about a request of ip to path.
func (s *stack) check(t *testing.T, ip, path string) (allowed bool, reason string) {
	t.Helper()
	body := fmt.Sprintf(`{"ip": %q, "endpoint": %q, "method": "GET"}`, ip, path)
	resp, err := http.Post(s.limiter+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var d struct {
		Allowed bool   `json:"allowed"`
		Reason  string `json:"reason"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
		t.Fatal(err)
	}
	return d.Allowed, d.Reason
}

// banByDetector sends ip over its limit until the detector bans it.
func (s *stack) banByDetector(t *testing.T, ip string) {
	t.Helper()
	for i := range 12 {
		s.check(t, ip, fmt.Sprintf("/api/item/%d", i))
	}
	testkit.WaitFor(t, 30*time.Second, "the detector's ban of "+ip, func() bool {
		_, reason := s.check(t, ip, "/api/item/0")
		return reason == "banned"
	})
}

// browser is a user agent of the console: it keeps the cookies (Secure
// ones too: the test serves plain HTTP on loopback, as a browser allows)
// and does not follow redirects, so each answer can be checked.
type browser struct {
	t      testing.TB
	base   string
	mu     sync.Mutex
	jar    map[string]string
	client *http.Client
}

func newBrowser(t testing.TB, base string) *browser {
	return &browser{t: t, base: base, jar: map[string]string{}, client: &http.Client{
		Timeout:       30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// page is an answer of the console.
type page struct {
	status   int
	body     string
	location string
	header   http.Header
}

// do sends a request with the browser's cookies and the headers a browser
// sends on a same-origin form, unless headers replace them.
func (b *browser) do(method, path string, form url.Values, headers ...string) page {
	b.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, b.base+path, body)
	if err != nil {
		b.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", b.base)
		req.Header.Set("Sec-Fetch-Site", "same-origin")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	b.mu.Lock()
	for name, value := range b.jar {
		req.AddCookie(&http.Cookie{Name: name, Value: value})
	}
	b.mu.Unlock()
	resp, err := b.client.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	b.mu.Lock()
	for _, c := range resp.Cookies() {
		if c.MaxAge < 0 {
			delete(b.jar, c.Name)
		} else {
			b.jar[c.Name] = c.Value
		}
	}
	b.mu.Unlock()
	return page{status: resp.StatusCode, body: string(raw), location: resp.Header.Get("Location"), header: resp.Header}
}

func (b *browser) get(path string) page { b.t.Helper(); return b.do(http.MethodGet, path, nil) }

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf returns the CSRF token of the forms of p.
func (p page) csrf(t testing.TB) string {
	t.Helper()
	m := csrfField.FindStringSubmatch(p.body)
	if m == nil {
		t.Fatalf("no CSRF token in the page (%d):\n%s", p.status, p.body)
	}
	return m[1]
}

// login logs the browser in as user and returns the overview's page.
func (b *browser) login(name, password string) page {
	b.t.Helper()
	form := b.get("/login")
	p := b.do(http.MethodPost, "/login", url.Values{"csrf": {form.csrf(b.t)}, "user": {name}, "password": {password}})
	if p.status != http.StatusSeeOther || p.location != "/" {
		b.t.Fatalf("login of %s: %d to %q:\n%s", name, p.status, p.location, p.body)
	}
	return b.get("/")
}
