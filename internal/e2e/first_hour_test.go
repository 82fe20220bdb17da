package e2e

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/config"
	"github.com/ratewarden/ratewarden/internal/testkit/gatewaytest"
	"github.com/ratewarden/ratewarden/internal/testkit/pgtest"
	"github.com/ratewarden/ratewarden/internal/testkit/proctest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// TestFirstHour is a newcomer's first hour with the repository: make run in
// a fresh clone, every curl line it prints, Ctrl-C; make run again, which
// keeps the tokens; a run whose limiter cannot start; a run whose address
// is taken. The clone is of the
// checkout's committed HEAD: what it tests is what is committed, not the
// uncommitted changes of the checkout. The run's addresses are free ports,
// its Redis keys and its database its own; no timing is asserted, but the
// time make run took to answer is logged (it includes the build).
func TestFirstHour(t *testing.T) {
	for _, tool := range []string{"make", "curl", "git", "bash"} {
		gatewaytest.Program(t, tool, "", tool) // run by name, from the PATH
	}
	dir := cloneHead(t)
	env, addrs := firstHourEnv(t)

	var apiToken, adminToken string
	t.Run("first run", func(t *testing.T) {
		r := startMakeRun(t, dir, env)
		r.awaitBanner(t)
		apiToken = readToken(t, filepath.Join(dir, ".local/run/api-token"))
		adminToken = readToken(t, filepath.Join(dir, ".local/run/admin-token"))
		if apiToken == adminToken {
			t.Error("the API token and the admin token are the same")
		}
		for _, name := range []string{"api-token", "admin-token"} {
			if path := filepath.Join(dir, ".local/run", name); !strings.Contains(r.out.String(), path) {
				t.Errorf("the banner does not name %s", path)
			}
		}
		runCurlLines(t, r.curlLines(t))
		r.interrupt(t, addrs)
	})
	if t.Failed() {
		return
	}

	t.Run("second run keeps the tokens", func(t *testing.T) {
		r := startMakeRun(t, dir, env)
		r.awaitBanner(t)
		if got := readToken(t, filepath.Join(dir, ".local/run/api-token")); got != apiToken {
			t.Error("the second run made a new API token: a gateway given the first one is locked out")
		}
		if got := readToken(t, filepath.Join(dir, ".local/run/admin-token")); got != adminToken {
			t.Error("the second run made a new admin token")
		}
		runCurlLines(t, r.curlLines(t))
		r.interrupt(t, addrs)
	})

	t.Run("a limiter that cannot start stops the run", func(t *testing.T) {
		// 5 bytes: the limiter refuses it at start, after devkafka, the
		// archiver and the detector have started.
		r := startMakeRun(t, dir, append(env, "ADMIN_TOKEN=short"))
		select {
		case <-r.done:
		case <-time.After(5 * time.Minute):
			t.Fatalf("make run still runs 5 minutes after its limiter was refused:\n%s", r.out)
		}
		out := r.out.String()
		if r.cmd.ProcessState.Success() {
			t.Errorf("make run exited 0 though its limiter did not start:\n%s", out)
		}
		for _, want := range []string{"limiter: ADMIN_TOKEN:", "run: limiter exited (status 1) before listening on " + addrs["LIMITER_ADDR"]} {
			if !strings.Contains(out, want) {
				t.Errorf("make run's output does not say %q:\n%s", want, out)
			}
		}
		if strings.Contains(out, "ratewarden is running") {
			t.Errorf("make run printed its banner though the limiter did not start:\n%s", out)
		}
		assertStopped(t, dir, nil, byAddr(addrs))
	})

	t.Run("an address in use stops the run before it starts anything", func(t *testing.T) {
		// Another make run, say: this one must not start beside it, nor
		// take its limiter for its own.
		taken, err := net.Listen("tcp", addrs["LIMITER_ADDR"])
		if err != nil {
			t.Fatal(err)
		}
		defer taken.Close()
		r := startMakeRun(t, dir, env)
		select {
		case <-r.done:
		case <-time.After(5 * time.Minute):
			t.Fatalf("make run still runs 5 minutes after it found its address taken:\n%s", r.out)
		}
		out := r.out.String()
		want := "run: something already listens on " + addrs["LIMITER_ADDR"] + " (LIMITER_ADDR)"
		if r.cmd.ProcessState.Success() || !strings.Contains(out, want) {
			t.Errorf("make run with its address taken: %v, want a failure saying %q:\n%s", r.cmd.ProcessState, want, out)
		}
		if strings.Contains(out, "starting devkafka") {
			t.Errorf("make run started devkafka though its address was taken:\n%s", out)
		}
		taken.Close()
		assertStopped(t, dir, nil, byAddr(addrs))
	})
}

// cloneHead clones the repository this test is in, at its HEAD, into a
// temporary directory, and returns the clone's root.
func cloneHead(t *testing.T) string {
	t.Helper()
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not in a git checkout, nothing to clone: %v", err)
	}
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse HEAD: %v", err)
	}
	dir := filepath.Join(t.TempDir(), "ratewarden")
	for _, args := range [][]string{
		{"clone", "--quiet", "--no-checkout", strings.TrimSpace(string(root)), dir},
		{"-C", dir, "checkout", "--quiet", "--detach", strings.TrimSpace(string(head))},
	} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	return dir
}

// firstHourEnv returns the environment of the test's make runs, and the
// addresses it gives them by variable. It leaves out what would change a
// newcomer's run (tokens, listeners, rules, an enclosing make's flags).
func firstHourEnv(t *testing.T) ([]string, map[string]string) {
	t.Helper()
	drop := regexp.MustCompile(`^(API_TOKENS|ADMIN_TOKEN|[A-Z_]*ADDRS?|KAFKA_BROKERS|REDIS_URL|REDIS_KEY_PREFIX|DATABASE_URL|` +
		`RULES_FILE|RLS_CONFIG_DIR|CONFIG_TYPE|TLS_[A-Z_]*|LOG_[A-Z_]*|MAKEFLAGS|MFLAGS|MAKELEVEL)=`)
	var env []string
	for _, kv := range os.Environ() {
		if !drop.MatchString(kv) {
			env = append(env, kv)
		}
	}
	addrs := map[string]string{}
	for _, name := range []string{"LIMITER_ADDR", "GRPC_LISTEN_ADDR", "DETECTOR_ADDR", "ARCHIVER_ADDR", "CONSOLE_ADDR", "KAFKA_BROKERS"} {
		// KAFKA_BROKERS: nobody answers there, so make run starts devkafka.
		addrs[name] = proctest.FreeAddr(t)
		env = append(env, name+"="+addrs[name])
	}
	// The database does not exist yet: the archiver creates it.
	env = append(env,
		"REDIS_URL="+redistest.RequiredURL(t),
		"REDIS_KEY_PREFIX="+redistest.Prefix(t, redistest.Client(t)),
		"DATABASE_URL="+pgtest.Uncreated(t))
	return env, addrs
}

// makeRun is one make run in the foreground of a process group of its own,
// as a terminal runs it.
type makeRun struct {
	cmd  *exec.Cmd
	out  *proctest.Output
	done chan struct{}
	// stack is the processes make run had started once its banner was out.
	stack []procID
}

func startMakeRun(t *testing.T, dir string, env []string) *makeRun {
	t.Helper()
	r := &makeRun{out: &proctest.Output{}, done: make(chan struct{})}
	r.cmd = exec.Command("make", "run")
	r.cmd.Dir, r.cmd.Env = dir, env
	r.cmd.Stdout, r.cmd.Stderr = r.out, r.out
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A process started in the background by a shell ignores SIGINT, and so
	// would make run (bash cannot trap a signal ignored at its start): while
	// this process handles SIGINT, the child starts with its default.
	interrupts := make(chan os.Signal, 1)
	signal.Notify(interrupts, os.Interrupt)
	err := r.cmd.Start()
	signal.Stop(interrupts)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = r.cmd.Wait(); close(r.done) }()
	t.Cleanup(func() {
		select {
		case <-r.done:
		default: // the test failed before its Ctrl-C
			_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGTERM)
			select {
			case <-r.done:
			case <-time.After(time.Minute):
				_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
				<-r.done
			}
		}
		for _, p := range r.stack {
			if p.alive() {
				_ = syscall.Kill(p.pid, syscall.SIGKILL)
			}
		}
		if t.Failed() {
			t.Logf("--- make run output ---\n%s", r.out)
		}
	})
	return r
}

// awaitBanner waits for make run to say it is running and records the
// processes it started.
func (r *makeRun) awaitBanner(t *testing.T) {
	t.Helper()
	start := time.Now()
	// Generous: on a loaded machine with a cold build cache, the build alone
	// takes minutes.
	deadline := start.Add(15 * time.Minute)
	for !strings.Contains(r.out.String(), "Press Ctrl-C to stop.") {
		select {
		case <-r.done:
			t.Fatalf("make run exited before it was running:\n%s", r.out)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("make run did not say it was running within 15 minutes:\n%s", r.out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("make run answered %v after it started (the build included)", time.Since(start).Round(time.Second))
	if !strings.Contains(r.out.String(), "ratewarden is running") {
		t.Fatalf("make run's banner does not say it is running:\n%s", r.out)
	}
	r.stack = descendants(t, r.cmd.Process.Pid)
}

// curlLines returns the curl lines of make run's banner, failing the test
// unless they cover every API a newcomer tries first.
func (r *makeRun) curlLines(t *testing.T) []string {
	t.Helper()
	var lines []string
	for _, line := range strings.Split(r.out.String(), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "curl ") {
			lines = append(lines, strings.TrimSpace(line))
		}
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`api-token.*-X POST \S+/v1/check `),
		regexp.MustCompile(`api-token.*-X POST \S+/v1/report `),
		regexp.MustCompile(`api-token.*-X POST \S+/json `),
		regexp.MustCompile(`admin-token.*-X POST \S+/v1/admin/bans `),
		regexp.MustCompile(`admin-token.*\S+/v1/admin/bans$`),
		regexp.MustCompile(`/readyz$`),
		regexp.MustCompile(`/metrics \| grep `),
	} {
		if !containsMatch(lines, want) {
			t.Errorf("no curl line of make run matches %s; its lines:\n%s", want, strings.Join(lines, "\n"))
		}
	}
	return lines
}

func containsMatch(lines []string, re *regexp.Regexp) bool {
	for _, l := range lines {
		if re.MatchString(l) {
			return true
		}
	}
	return false
}

// runCurlLines runs each line as printed, from a directory other than the
// clone, with bash, as a newcomer pasting it would; curl writes the HTTP
// status to stderr besides (a pipe after it, as in the metrics line, sees
// the body only). Each must answer 2xx and its pipeline succeed.
func runCurlLines(t *testing.T, lines []string) {
	t.Helper()
	elsewhere := t.TempDir()
	for _, line := range lines {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		script := "set -o pipefail\ncurl() { command curl -w '%{stderr}%{http_code}\\n' \"$@\"; }\n" + line
		cmd := exec.CommandContext(ctx, "bash", "-c", script)
		cmd.Dir = elsewhere
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		cancel()
		status := strings.TrimSpace(stderr.String())
		if err != nil || len(status) != 3 || status[0] != '2' {
			t.Errorf("%s\n  status %q, %v; output:\n%s", line, status, err, stdout.String())
			continue
		}
		t.Logf("%s -> %s", line, status)
	}
}

// interrupt presses Ctrl-C (SIGINT to make run's process group) and checks
// that the run stopped everything it started.
func (r *makeRun) interrupt(t *testing.T, addrs map[string]string) {
	t.Helper()
	listeners := listening(t, r.stack)
	for name, addr := range addrs {
		if !listeners[addr] {
			t.Errorf("nothing of make run listens on %s (%s); its listeners: %v", addr, name, listeners)
		}
	}
	for addr := range listeners {
		if !strings.HasPrefix(addr, "127.0.0.1:") && !strings.HasPrefix(addr, "[::1]:") {
			t.Errorf("make run listens on %s, beyond the loopback interface", addr)
		}
	}
	if err := syscall.Kill(-r.cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.done:
	case <-time.After(3 * time.Minute):
		t.Fatalf("make run still runs 3 minutes after Ctrl-C:\n%s", r.out)
	}
	used := byAddr(addrs)
	for addr := range listeners {
		if used[addr] == "" {
			used[addr] = "a listener of the stack"
		}
	}
	assertStopped(t, r.cmd.Dir, r.stack, used)
}

// readToken returns the token in path, failing the test unless the file is
// its owner's alone and the limiter accepts the token.
func readToken(t *testing.T, path string) string {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if mode := info.Mode().Perm(); mode != 0o600 {
		t.Errorf("%s has mode %v, want 0600", path, mode)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSuffix(string(b), "\n")
	if len(token) < config.MinTokenBytes || strings.ContainsAny(token, ", \t\n") {
		t.Errorf("%s holds %d bytes, not one token of %d bytes or more", path, len(token), config.MinTokenBytes)
	}
	return token
}
