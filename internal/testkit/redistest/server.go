package redistest

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden/internal/testkit"
)

// Server is a redis-server process of the test's own, without
// persistence, on a loopback address it keeps: Kill stops it (SIGKILL, as
// a crash), and StartServerAt at the same address starts a new, empty one,
// as a restarted Redis. It is killed when the test ends; its log is
// printed when the test failed.
type Server struct {
	// Addr is the server's host:port.
	Addr string
	cmd  *exec.Cmd
	done chan struct{}
}

// StartServer starts a redis-server of the test's own on a free loopback
// port and returns its address. It is for tests that flush scripts, read
// command statistics or load Redis heavily: the local Redis is shared.
func StartServer(tb testing.TB) string {
	tb.Helper()
	return StartServerAt(tb, freeAddr(tb)).Addr
}

// StartServerAt starts a redis-server at addr (host:port on loopback),
// with args added to its command line (replication or Sentinel settings,
// say), and waits until it answers.
func StartServerAt(tb testing.TB, addr string, args ...string) *Server {
	tb.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		testkit.Unavailable(tb, "redis-server not found: install Debian's redis-server package")
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		tb.Fatalf("redis-server address %q: %v", addr, err)
	}
	dir := tb.TempDir()
	logFile := filepath.Join(dir, "redis.log")
	s := &Server{Addr: addr, done: make(chan struct{})}
	s.cmd = exec.Command("redis-server", append(args, "--port", port, "--bind", "127.0.0.1", "--dir", dir,
		"--save", "", "--appendonly", "no", "--logfile", logFile)...)
	if err := s.cmd.Start(); err != nil {
		tb.Fatalf("start redis-server: %v", err)
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	tb.Cleanup(func() {
		s.Kill()
		if tb.Failed() {
			log, _ := os.ReadFile(logFile)
			tb.Logf("--- redis-server %s log (last 3000 bytes) ---\n%s", addr, tail(log, 3000))
		}
	})
	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer client.Close()
	testkit.WaitFor(tb, 5*time.Second, "redis-server on "+addr, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		return client.Ping(ctx).Err() == nil
	})
	return s
}

// Kill sends SIGKILL to the server and waits for its exit; a server
// already gone is left as it is.
func (s *Server) Kill() {
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Kill()
	<-s.done
}

// Hang stops the server (SIGSTOP): its port still accepts connections, and
// nothing is answered, as a Redis that hangs.
func (s *Server) Hang() { _ = s.cmd.Process.Signal(syscall.SIGSTOP) }

// freeAddr returns a loopback address whose port was free a moment ago.
func freeAddr(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// PrivateClient returns a client of a redis-server of the test's own
// (StartServer), closed when the test ends.
func PrivateClient(tb testing.TB) *redis.Client {
	tb.Helper()
	client := redis.NewClient(&redis.Options{Addr: StartServer(tb)})
	tb.Cleanup(func() { client.Close() })
	return client
}
