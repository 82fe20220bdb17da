// Package gatewaytest holds what the tests of the gateway recipes share:
// finding the programs they run, and running the access-log recipe's
// shipper (deploy/gateways/nginx/ship-access-log.sh) as it is shipped.
package gatewaytest

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/testkit"
)

// Program finds a program a test runs: on the PATH, else at fallback (a
// root-only directory such as /usr/sbin). Without it the test is skipped,
// unless CI is set: CI must run it (it installs the Debian package pkg).
func Program(tb testing.TB, name, fallback, pkg string) string {
	tb.Helper()
	if bin, err := exec.LookPath(name); err == nil {
		return bin
	}
	if _, err := os.Stat(fallback); err == nil {
		return fallback
	}
	testkit.Unavailable(tb, "%s not found; install it (apt-get install -y %s) to run this test", name, pkg)
	return ""
}

// Ship runs the shipper script on logPath, to topic on brokers, until the
// test ends (the script's tail and kcat with it), and returns once tail has
// found the log missing: the caller starts nginx after, which creates the
// log, and tail -F reads the new file from its start, so no line is
// missed. It needs bash and kcat.
func Ship(tb testing.TB, script, brokers, topic, logPath string) {
	tb.Helper()
	bash := Program(tb, "bash", "/bin/bash", "bash")
	Program(tb, "kcat", "/usr/bin/kcat", "kcat")
	cmd := exec.Command(bash, script)
	cmd.Env = append(os.Environ(), "KAFKA_BROKERS="+brokers, "ACCESS_LOG_TOPIC="+topic, "ACCESS_LOG="+logPath)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // tail and kcat go with it
	stderr, err := cmd.StderrPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	var (
		mu  sync.Mutex
		out bytes.Buffer
	)
	waiting := make(chan struct{})
	var found sync.Once
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		s := bufio.NewScanner(stderr)
		for s.Scan() {
			mu.Lock()
			fmt.Fprintln(&out, s.Text())
			mu.Unlock()
			if strings.Contains(s.Text(), logPath) {
				found.Do(func() { close(waiting) })
			}
		}
	}()
	done := make(chan struct{})
	go func() { <-copied; _ = cmd.Wait(); close(done) }()
	tb.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		if tb.Failed() {
			mu.Lock()
			tb.Logf("--- shipper stderr ---\n%s", out.String())
			mu.Unlock()
		}
	})
	select {
	case <-waiting:
	case <-done:
		tb.Fatalf("the shipper exited at start:\n%s", out.String())
	case <-time.After(5 * time.Second):
		tb.Fatal("tail did not report the missing log within 5s")
	}
}
