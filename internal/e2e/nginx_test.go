package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/proctest"
)

// nginxRecipe is the gateway recipe under test, run as shipped except for
// the three addresses and the token nginxStart substitutes.
const nginxRecipe = "../../deploy/gateways/nginx/ratewarden.conf"

// nginxRules: /api/** admits 3 requests a minute per client IP; the exempt
// tier and endpoint are what a client would name to slip through if the
// recipe let its own X-User-Tier or X-Forwarded-Uri reach the limiter.
const nginxRules = `
rules:
  - id: api-per-ip
    match: {endpoints: ["/api/**"]}
    key: [ip]
    algorithm: sliding_window
    limits: [{requests: 3, per: 1m}]
exempt:
  tiers: [SUPER_ADMIN]
  endpoints: ["/healthz"]
`

// nginxBinary finds nginx with the auth_request module. Without it the test
// is skipped, unless CI is set: CI must have it (Debian package "nginx").
func nginxBinary(t *testing.T) string {
	t.Helper()
	missing := func(why string) {
		t.Helper()
		testkit.Unavailable(t, "%s; install it (apt-get install -y nginx) to run the nginx gateway test", why)
	}
	bin, err := exec.LookPath("nginx")
	if err != nil {
		bin = "/usr/sbin/nginx" // not on a non-root user's PATH on Debian
		if _, err := os.Stat(bin); err != nil {
			missing("nginx binary not found")
		}
	}
	out, err := exec.Command(bin, "-V").CombinedOutput()
	if err != nil {
		t.Fatalf("%s -V: %v\n%s", bin, err, out)
	}
	if !bytes.Contains(out, []byte("http_auth_request_module")) {
		missing(bin + " lacks http_auth_request_module")
	}
	return bin
}

// nginxProc is one nginx in the foreground, single process, confined to its
// own prefix directory.
type nginxProc struct {
	addr string
	dir  string
	cmd  *exec.Cmd
	out  *bytes.Buffer
	done chan struct{}
}

// nginxStart renders the recipe with the given limiter and application
// addresses and API token, wraps it in a minimal nginx.conf, checks it with
// nginx -t and runs it until the test ends.
func nginxStart(t *testing.T, bin, limiterAddr, appAddr, token string) *nginxProc {
	t.Helper()
	return nginxStartWith(t, bin, limiterAddr, appAddr, token, "")
}

// nginxStartWith is nginxStart with the file include (when not empty)
// included in the http block before the recipe.
func nginxStartWith(t *testing.T, bin, limiterAddr, appAddr, token, include string) *nginxProc {
	t.Helper()
	recipe, err := os.ReadFile(nginxRecipe)
	if err != nil {
		t.Fatal(err)
	}
	n := &nginxProc{addr: proctest.FreeAddr(t), dir: t.TempDir(), out: &bytes.Buffer{}, done: make(chan struct{})}
	conf := string(recipe)
	for _, r := range []struct{ old, new string }{
		{"server 127.0.0.1:8080;", "server " + limiterAddr + ";"},
		{"server 127.0.0.1:3000;", "server " + appAddr + ";"},
		{"listen 80;", "listen " + n.addr + ";"},
		{`"Bearer change-me-api-token"`, `"Bearer ` + token + `"`},
	} {
		if c := strings.Count(conf, r.old); c != 1 {
			t.Fatalf("%s: %q appears %d times, want once (the test substitutes it)", nginxRecipe, r.old, c)
		}
		conf = strings.Replace(conf, r.old, r.new, 1)
	}
	p := func(name string) string { return filepath.Join(n.dir, name) }
	if err := os.WriteFile(p("ratewarden.conf"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	// Every path nginx writes is in n.dir: it runs as any user, leaves
	// nothing in /var, and the compiled-in paths are never touched.
	main := fmt.Sprintf(`daemon off;
master_process off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log info;
events { worker_connections 256; }
http {
    access_log %[1]s/access.log;
    client_body_temp_path %[1]s/client_body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
    %[2]s
    include %[1]s/ratewarden.conf;
}
`, n.dir, includeLine(include))
	if err := os.WriteFile(p("nginx.conf"), []byte(main), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"-p", n.dir, "-c", p("nginx.conf"), "-e", p("error.log")}
	if out, err := exec.Command(bin, append([]string{"-t", "-q"}, args...)...).CombinedOutput(); err != nil {
		t.Fatalf("nginx -t: %v\n%s\n--- rendered recipe ---\n%s", err, out, conf)
	}
	n.cmd = exec.Command(bin, args...)
	n.cmd.Stdout, n.cmd.Stderr = n.out, n.out
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = n.cmd.Wait(); close(n.done) }()
	t.Cleanup(func() {
		n.stop(t)
		if t.Failed() {
			errLog, _ := os.ReadFile(p("error.log"))
			t.Logf("--- nginx output ---\n%s\n--- nginx error.log ---\n%s", n.out, errLog)
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.DialTimeout("tcp", n.addr, time.Second); err == nil {
			c.Close()
			return n
		}
		select {
		case <-n.done:
			errLog, _ := os.ReadFile(p("error.log"))
			t.Fatalf("nginx exited at start:\n%s\n%s", n.out, errLog)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("nginx not listening on %s after 10s", n.addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop asks nginx to quit (SIGQUIT: graceful), kills it after 5 s, and
// waits for the process to be gone.
func (n *nginxProc) stop(t *testing.T) {
	select {
	case <-n.done:
		return
	default:
	}
	_ = n.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-n.done:
	case <-time.After(5 * time.Second):
		t.Errorf("nginx did not quit within 5s of SIGQUIT; killing it")
		_ = n.cmd.Process.Kill()
		<-n.done
	}
}

// nginxAnswer is what a client got through nginx.
type nginxAnswer struct {
	status int
	header http.Header
	body   string
}

// nginxGet sends GET path through nginx with the header name/value pairs.
func nginxGet(t *testing.T, c *http.Client, n *nginxProc, path string, header ...string) nginxAnswer {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+n.addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return nginxAnswer{resp.StatusCode, resp.Header, string(body)}
}

// nginxRetryAfter is the Retry-After of a, in seconds; 0 when absent or not
// a number.
func nginxRetryAfter(a nginxAnswer) int {
	s, err := strconv.Atoi(a.header.Get("Retry-After"))
	if err != nil {
		return 0
	}
	return s
}

// The nginx recipe in deploy/gateways/nginx, run by a real nginx in front of
// a counting application and the real limiter (AUTH_DENY_STATUS=401, nginx
// trusted, API_TOKENS holding nginx's token): allowed requests reach the
// application; the 4th request of a client within the minute gets 429 with
// Retry-After and does not; a banned client gets 403 and does not; other
// clients are independent; headers a client sets to impersonate the gateway
// change nothing; a client's own Authorization header reaches the
// application and the gateway's token never does; input the limiter refuses
// is a 400; an nginx with a wrong token fails closed with 503, and so does
// nginx with the limiter down.
func TestNginxGatewayRecipe(t *testing.T) {
	bin := nginxBinary(t)
	e := newEnv(t)
	rules := filepath.Join(t.TempDir(), "nginx-rules.yaml")
	if err := os.WriteFile(rules, []byte(nginxRules), 0o600); err != nil {
		t.Fatal(err)
	}
	const token = "nginx-api-token-0123456789abcdef"
	lim := e.start("limiter", "RULES_FILE", rules, "TRUSTED_PROXIES", "127.0.0.1", "AUTH_DENY_STATUS", "401", "API_TOKENS", token)

	var hits, leaks atomic.Int64
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if strings.Contains(r.Header.Get("Authorization"), token) {
			leaks.Add(1)
		}
		fmt.Fprintf(w, "app: %s %s %s", r.Method, r.URL.Path, r.Header.Get("Authorization"))
	}))
	defer app.Close()

	n := nginxStart(t, bin, lim.addr, strings.TrimPrefix(app.URL, "http://"), token)
	client := &http.Client{Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()

	// Each client is told apart by the X-Forwarded-For it sends: the test
	// connects from 127.0.0.1, nginx appends that to the client's value, and
	// the limiter, trusting 127.0.0.1, walks left to the client's address.
	// (A real client's own address is not trusted, so its prepended value is
	// ignored: see the recipe.)
	const alice, bob, banned, mallory = "198.51.100.1", "198.51.100.2", "203.0.113.9", "198.51.100.66"
	wantHits := int64(0)
	expectHits := func(when string) {
		t.Helper()
		if got := hits.Load(); got != wantHits {
			t.Fatalf("%s: the application got %d requests, want %d", when, got, wantHits)
		}
	}

	for i := 1; i <= 3; i++ {
		a := nginxGet(t, client, n, fmt.Sprintf("/api/books/%d?x=1", i), "X-Forwarded-For", alice)
		wantHits++
		if a.status != http.StatusOK || !strings.HasPrefix(a.body, "app: GET /api/books/") {
			t.Fatalf("alice request %d: %d %q, want 200 from the application", i, a.status, a.body)
		}
		if got, want := a.header.Get("X-RateLimit-Remaining"), strconv.Itoa(3-i); got != want || a.header.Get("RateLimit") == "" {
			t.Errorf("alice request %d: X-RateLimit-Remaining %q (want %s), RateLimit %q", i, got, want, a.header.Get("RateLimit"))
		}
	}
	expectHits("after alice's 3 allowed requests")

	a := nginxGet(t, client, n, "/api/books/4", "X-Forwarded-For", alice)
	if a.status != http.StatusTooManyRequests || nginxRetryAfter(a) < 1 {
		t.Fatalf("alice request 4: %d, Retry-After %q, body %q; want 429 with Retry-After ≥ 1", a.status, a.header.Get("Retry-After"), a.body)
	}
	if !strings.Contains(a.body, `"rate_limited"`) || a.header.Get("X-RateLimit-Remaining") != "0" || a.header.Get("RateLimit-Policy") == "" {
		t.Errorf("alice's 429: body %q, headers %v", a.body, a.header)
	}
	t.Logf("4th request: 429, Retry-After %s, RateLimit %q", a.header.Get("Retry-After"), a.header.Get("RateLimit"))
	expectHits("after alice's 429")

	// Another client keeps its own budget; its own Authorization header
	// (its credentials for the application) is not the gateway's: it
	// neither reaches the limiter nor stops at the gateway.
	if b := nginxGet(t, client, n, "/api/books/1", "X-Forwarded-For", bob, "Authorization", "Bearer bobs-own-credential"); b.status != http.StatusOK ||
		!strings.HasSuffix(b.body, " Bearer bobs-own-credential") {
		t.Fatalf("bob after alice is limited: %d %q, want 200 with bob's own Authorization reaching the application", b.status, b.body)
	}
	wantHits++
	expectHits("after bob's request")

	// A client naming an exempt endpoint, method and tier in the headers the
	// limiter reads is limited like anyone: the recipe sends the limiter
	// only the headers it sets itself.
	spoof := []string{"X-Forwarded-For", mallory, "X-Forwarded-Uri", "/healthz", "X-Forwarded-Method", "OPTIONS",
		"X-Original-URI", "/healthz", "X-User-Tier", "SUPER_ADMIN", "X-User-Id", "root"}
	for i := 1; i <= 4; i++ {
		m := nginxGet(t, client, n, "/api/admin", spoof...)
		want := http.StatusOK
		if i == 4 {
			want = http.StatusTooManyRequests
		} else {
			wantHits++
		}
		if m.status != want {
			t.Fatalf("spoofing client request %d: %d %q, want %d", i, m.status, m.body, want)
		}
	}
	expectHits("after the spoofing client")

	// A ban through the admin API: 403 with the ban's Retry-After.
	if code, body := admin(t, lim, "POST", "/v1/admin/bans", adminToken, `{"scope":"ip","subject":"`+banned+`","duration":"1h","reason":"nginx e2e"}`); code != http.StatusCreated {
		t.Fatalf("ban: %d %s", code, body)
	}
	bn := nginxGet(t, client, n, "/api/books/1", "X-Forwarded-For", banned)
	if bn.status != http.StatusForbidden || !strings.Contains(bn.body, `"banned"`) || nginxRetryAfter(bn) < 3000 {
		t.Fatalf("banned client: %d, Retry-After %q, body %q; want 403 with the ban's Retry-After (~3600)", bn.status, bn.header.Get("Retry-After"), bn.body)
	}
	expectHits("after the banned client")
	if b := nginxGet(t, client, n, "/api/books/2", "X-Forwarded-For", bob); b.status != http.StatusOK {
		t.Fatalf("bob after the ban of another client: %d, want 200", b.status)
	}
	wantHits++

	// The auth location is internal: a client cannot call it.
	if x := nginxGet(t, client, n, "/_ratewarden_auth"); x.status != http.StatusNotFound {
		t.Fatalf("/_ratewarden_auth from outside: %d, want 404", x.status)
	}
	expectHits("after the internal location")

	// Input the limiter refuses (a path that is not UTF-8) is a 400, without
	// Retry-After, and never reaches the application.
	if status, header := nginxRaw(t, n, "GET /api/\xff\xfe HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: "+bob+"\r\nConnection: close\r\n\r\n"); status != http.StatusBadRequest || header.Get("Retry-After") != "" {
		t.Fatalf("non-UTF-8 path: %d, Retry-After %q; want 400 without Retry-After", status, header.Get("Retry-After"))
	}
	expectHits("after the refused path")

	// An nginx whose token the limiter refuses fails closed: 503, not the
	// 429 the limiter's 401 would otherwise become.
	wrong := nginxStart(t, bin, lim.addr, strings.TrimPrefix(app.URL, "http://"), "wrong-api-token-0123456789abcdef")
	if w := nginxGet(t, client, wrong, "/api/books/1", "X-Forwarded-For", bob); w.status != http.StatusServiceUnavailable || w.header.Get("Retry-After") != "1" {
		t.Fatalf("nginx with a wrong token: %d, Retry-After %q, body %q; want 503 with Retry-After 1", w.status, w.header.Get("Retry-After"), w.body)
	}
	expectHits("through the nginx with a wrong token")
	if l := leaks.Load(); l != 0 {
		t.Fatalf("the application got the gateway's token %d times", l)
	}

	// The limiter down: nginx fails closed with 503 and Retry-After: 1.
	lim.stop(syscall.SIGTERM)
	d := nginxGet(t, client, n, "/api/books/3", "X-Forwarded-For", bob)
	if d.status != http.StatusServiceUnavailable || d.header.Get("Retry-After") != "1" {
		t.Fatalf("limiter down: %d, Retry-After %q, body %q; want 503 with Retry-After 1", d.status, d.header.Get("Retry-After"), d.body)
	}
	expectHits("with the limiter down")

	client.CloseIdleConnections()
	n.stop(t)
	select {
	case <-n.done:
	default:
		t.Fatal("nginx still running after stop")
	}
	if ps := n.cmd.ProcessState; ps == nil || !ps.Exited() {
		t.Fatalf("nginx process state %v, want exited", ps)
	}
}

// nginxRaw writes a raw request (for bytes net/http will not send) and
// returns the status and headers of the answer.
func nginxRaw(t *testing.T, n *nginxProc, raw string) (int, http.Header) {
	t.Helper()
	c, err := net.DialTimeout("tcp", n.addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return resp.StatusCode, resp.Header
}

// includeLine is an nginx include of file, or nothing when file is empty.
func includeLine(file string) string {
	if file == "" {
		return ""
	}
	return "include " + file + ";"
}

// The nginx recipe releases holds: a concurrency rule of one request in
// flight per client; while the application holds the first request, the
// second is refused with 429; once the first response is sent, nginx's
// post_action reports it to /v1/report/auth with the hold the check
// answered, and the client's next request is admitted well before the
// hold's lifetime (10 minutes) could have lapsed.
func TestNginxRecipeReleasesHolds(t *testing.T) {
	bin := nginxBinary(t)
	e := newEnv(t)
	rules := filepath.Join(t.TempDir(), "nginx-rules.yaml")
	const holdRules = `
rules:
  - id: one-in-flight
    match: {endpoints: ["/slow/**"]}
    key: [ip]
    algorithm: concurrency
    limits: [{concurrent: 1, hold: 10m}]
`
	if err := os.WriteFile(rules, []byte(holdRules), 0o600); err != nil {
		t.Fatal(err)
	}
	const token = "nginx-api-token-0123456789abcdef"
	lim := e.start("limiter", "RULES_FILE", rules, "TRUSTED_PROXIES", "127.0.0.1", "AUTH_DENY_STATUS", "401", "API_TOKENS", token)
	entered, leave := make(chan struct{}, 1), make(chan struct{})
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/slow/1":
			entered <- struct{}{}
			<-leave
		case "/slow/hangup": // until nginx gives up on it
			entered <- struct{}{}
			<-r.Context().Done()
			return
		}
		fmt.Fprint(w, "done")
	}))
	defer app.Close()
	n := nginxStart(t, bin, lim.addr, strings.TrimPrefix(app.URL, "http://"), token)
	client := &http.Client{Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	const alice = "198.51.100.7"

	first := make(chan nginxAnswer, 1)
	go func() { first <- nginxGet(t, client, n, "/slow/1", "X-Forwarded-For", alice) }()
	<-entered
	if a := nginxGet(t, client, n, "/slow/2", "X-Forwarded-For", alice); a.status != http.StatusTooManyRequests {
		t.Fatalf("a second request while the first is in flight: %d %q, want 429", a.status, a.body)
	}
	close(leave)
	if a := <-first; a.status != http.StatusOK {
		t.Fatalf("the first request: %d %q", a.status, a.body)
	}
	testkit.WaitFor(t, 30*time.Second, "the report to release the first request's hold", func() bool {
		return nginxGet(t, client, n, "/slow/3", "X-Forwarded-For", alice).status == http.StatusOK
	})
	if got := lim.metric(t, "rate_limit_holds_total", `result="released"`); got < 1 {
		t.Errorf("holds released %v, want at least the first request's", got)
	}

	// A client that hangs up before its response (a browser that moves
	// on, or one that wants slots kept for nothing): nginx ends the
	// request and its post_action reports it, with nginx's $status of a
	// request that got no response ("009" there), which the limiter would
	// refuse. The report must still release the hold, or every such
	// request keeps its slot for the hold's whole lifetime.
	const bob = "198.51.100.8"
	conn, err := net.Dial("tcp", n.addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintf(conn, "GET /slow/hangup HTTP/1.1\r\nHost: app\r\nX-Forwarded-For: %s\r\n\r\n", bob); err != nil {
		t.Fatal(err)
	}
	<-entered
	_ = conn.Close()
	testkit.WaitFor(t, 30*time.Second, "the report of a request whose client hung up to release its hold", func() bool {
		return nginxGet(t, client, n, "/slow/4", "X-Forwarded-For", bob).status == http.StatusOK
	})
}
