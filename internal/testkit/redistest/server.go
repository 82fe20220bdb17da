package redistest

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden/internal/testkit"
)

// StartServer starts a redis-server of the test's own on a free loopback
// port, without persistence, and kills it (by PID) when the test ends. It
// is for tests that flush scripts, read command statistics or load Redis
// heavily: the local Redis is shared. It returns the server's address.
func StartServer(tb testing.TB) string {
	tb.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		testkit.Unavailable(tb, "redis-server not found: install Debian's redis-server package")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", tb.TempDir())
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start redis-server: %v", err)
	}
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	client := redis.NewClient(&redis.Options{Addr: addr})
	defer client.Close()
	deadline := time.Now().Add(5 * time.Second)
	for client.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			tb.Fatalf("private redis-server on %s did not start", addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return addr
}

// PrivateClient returns a client of a redis-server of the test's own
// (StartServer), closed when the test ends.
func PrivateClient(tb testing.TB) *redis.Client {
	tb.Helper()
	client := redis.NewClient(&redis.Options{Addr: StartServer(tb)})
	tb.Cleanup(func() { client.Close() })
	return client
}
