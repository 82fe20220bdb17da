package accesslog_test

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/accesslog"
	"github.com/ratewarden/ratewarden/internal/testkit/gatewaytest"
	"github.com/ratewarden/ratewarden/internal/testkit/kafkatest"
	"github.com/ratewarden/ratewarden/internal/testkit/proctest"
)

// The recipe under test, run as shipped: the log format with only the log's
// path substituted, and the shipper script as it is.
const (
	recipeDir     = "../../deploy/gateways/nginx/"
	recipeLogConf = recipeDir + "access-log.conf"
	recipeShipper = recipeDir + "ship-access-log.sh"
	recipeLogPath = "access_log /var/log/nginx/ratewarden.json ratewarden;"
)

// TestNginxRecipe runs the access-log recipe for real: nginx logs with
// access-log.conf in front of an application that sets X-User-Id and X-Cost,
// ship-access-log.sh sends the lines to a broker, and every line read back
// parses with the detector's default mapping into the outcome of its request.
func TestNginxRecipe(t *testing.T) {
	nginx := gatewaytest.Program(t, "nginx", "/usr/sbin/nginx", "nginx")

	const topic = "nginx.access"
	broker := kafkatest.StartBroker(t, topic)
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/login":
			w.Header().Set("X-User-Id", "alice") // the account the login tried
			w.WriteHeader(http.StatusUnauthorized)
		case "/api/chat":
			w.Header().Set("X-User-Id", "bob")
			w.Header().Set("X-Cost", "1500") // tokens used
			_, _ = io.WriteString(w, "answer")
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(app.Close)

	dir := t.TempDir()
	logPath := filepath.Join(dir, "ratewarden.json")
	gatewaytest.Ship(t, recipeShipper, broker.Addr(), topic, logPath)
	addr := startNginx(t, nginx, dir, logPath, strings.TrimPrefix(app.URL, "http://"))

	client := &http.Client{Timeout: 5 * time.Second}
	requests := []struct {
		method, path string
		status       int
		want         want
	}{
		{"POST", "/api/login?next=/home", 401, want{"alice", "/api/login", "POST", 401, 1}},
		{"GET", "/api/chat", 200, want{"bob", "/api/chat", "GET", 200, 1500}},
		{"GET", "/wp-admin//setup.php", 404, want{"", "/wp-admin/setup.php", "GET", 404, 1}},
		{"GET", "/healthz", 200, want{"", "/healthz", "GET", 200, 1}},
	}
	for _, r := range requests {
		req, err := http.NewRequest(r.method, "http://"+addr+r.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != r.status {
			t.Fatalf("%s %s: status %d, want %d", r.method, r.path, resp.StatusCode, r.status)
		}
		if u := resp.Header.Get("X-User-Id"); u != "" {
			t.Errorf("%s %s: the client got X-User-Id %q; the recipe hides it", r.method, r.path, u)
		}
	}

	// kcat reads its input 1 KiB at a time (kcat 1.7), so a line leaves once
	// a kilobyte more is logged (see ship-access-log.sh): a request whose
	// logged URI alone is longer pushes every line before it out.
	resp, err := client.Get("http://" + addr + "/push?" + strings.Repeat("p", 2048))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for deadline := time.Now().Add(10 * time.Second); kafkatest.CountMessages(t, broker.Brokers(), topic) < int64(len(requests)); {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d lines reached the topic within 10s", kafkatest.CountMessages(t, broker.Brokers(), topic), len(requests))
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // the push line itself, should it leave too
	n := kafkatest.CountMessages(t, broker.Brokers(), topic)
	msgs := kafkatest.ReadMessages(t, broker.Brokers(), topic, int(n), 10*time.Second)
	mapping := accesslog.DefaultMapping()
	got := map[string]want{}
	ids := map[string]bool{}
	for _, m := range msgs {
		o, err := mapping.Parse(m.Value, accesslog.Source{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Time: m.Time})
		if err != nil {
			t.Fatalf("line %s: %v", m.Value, err)
		}
		if o.IP != "127.0.0.1" || o.Instance != topic || ids[o.EventID] {
			t.Errorf("line %s: ip %q, instance %q, event id %q (repeated: %v)", m.Value, o.IP, o.Instance, o.EventID, ids[o.EventID])
		}
		ids[o.EventID] = true
		if o.Endpoint == "/push" {
			continue
		}
		if d := time.Since(o.TS); d < -time.Minute || d > time.Minute {
			t.Errorf("line %s: time %v, %v from now", m.Value, o.TS, d)
		}
		got[o.Endpoint] = want{o.UserID, o.Endpoint, o.Method, o.Status, o.Cost}
	}
	for _, r := range requests {
		if got[r.want.endpoint] != r.want {
			t.Errorf("%s %s: outcome %+v, want %+v", r.method, r.path, got[r.want.endpoint], r.want)
		}
	}
}

// want is what a request's outcome must say, beside its address and time.
type want struct {
	user, endpoint, method string
	status                 int
	cost                   int64
}

// startNginx runs nginx in the foreground with access-log.conf (its log
// written to logPath) and one server on a free port: /healthz answered by
// nginx, everything else proxied to the application at appAddr. It returns
// the server's address once nginx listens, and stops nginx when the test
// ends.
func startNginx(t *testing.T, bin, dir, logPath, appAddr string) string {
	t.Helper()
	recipe, err := os.ReadFile(recipeLogConf)
	if err != nil {
		t.Fatal(err)
	}
	if c := strings.Count(string(recipe), recipeLogPath); c != 1 {
		t.Fatalf("%s: %q appears %d times, want once (the test substitutes it)", recipeLogConf, recipeLogPath, c)
	}
	conf := strings.Replace(string(recipe), recipeLogPath, "access_log "+logPath+" ratewarden;", 1)
	p := func(name string) string { return filepath.Join(dir, name) }
	if err := os.WriteFile(p("access-log.conf"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := proctest.FreeAddr(t)
	// Every path nginx writes is in dir: it runs as any user and leaves
	// nothing in /var.
	main := fmt.Sprintf(`daemon off;
master_process off;
worker_processes 1;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log info;
events { worker_connections 64; }
http {
    client_body_temp_path %[1]s/client_body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
    include %[1]s/access-log.conf;
    server {
        listen %[2]s;
        location = /healthz { return 200 "ok\n"; }
        location = /push { return 204; }
        location / { proxy_pass http://%[3]s; }
    }
}
`, dir, addr, appAddr)
	if err := os.WriteFile(p("nginx.conf"), []byte(main), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"-p", dir, "-c", p("nginx.conf"), "-e", p("error.log")}
	if out, err := exec.Command(bin, append([]string{"-t", "-q"}, args...)...).CombinedOutput(); err != nil {
		t.Fatalf("nginx -t: %v\n%s\n--- rendered recipe ---\n%s", err, out, conf)
	}
	cmd := exec.Command(bin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGQUIT) // graceful
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Errorf("nginx did not quit within 5s of SIGQUIT; killing it")
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			errLog, _ := os.ReadFile(p("error.log"))
			t.Logf("--- nginx output ---\n%s\n--- nginx error.log ---\n%s", out.String(), errLog)
		}
	})
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return addr
		}
		select {
		case <-done:
			t.Fatalf("nginx exited at start:\n%s", out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("nginx not listening on %s after 5s", addr)
		}
	}
}
