package proctest

import (
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Build builds the commands of pkgs (paths as go build takes them) into a
// temporary directory, which it returns.
func Build(tb testing.TB, pkgs ...string) string {
	tb.Helper()
	dir := tb.TempDir()
	args := append([]string{"build", "-o", dir + string(filepath.Separator)}, pkgs...)
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		tb.Fatalf("go build %v: %v\n%s", pkgs, err, out)
	}
	return dir
}

// Run starts cmd, its stdout and stderr captured in out, and stops it when
// the test ends: SIGTERM, then SIGKILL after 10 s; the output is logged
// when the test failed. exited is closed once the process has exited.
func Run(tb testing.TB, cmd *exec.Cmd) (exited <-chan struct{}, out *Output) {
	tb.Helper()
	out = &Output{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start %s: %v", cmd.Path, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	tb.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if tb.Failed() {
			tb.Logf("--- %s output ---\n%s", filepath.Base(cmd.Path), out.String())
		}
	})
	return done, out
}
