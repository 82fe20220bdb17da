package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/ratewarden/ratewarden/internal/config"
)

// TestMain lets a test start this test binary as the command: with
// RATEWARDEN_TEST_MAIN=1 it runs main on the arguments it was given.
func TestMain(m *testing.M) {
	if os.Getenv("RATEWARDEN_TEST_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runMain runs the command with args and returns its stdout; it fails the
// test unless the command exits 0 with nothing on stderr.
func runMain(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "RATEWARDEN_TEST_MAIN=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil || stderr.Len() > 0 {
		t.Fatalf("limiter %q: %v, stderr %q", args, err, stderr.String())
	}
	return string(out)
}

// -h, -help and help print the usage and every variable the limiter reads,
// with its default, on stdout.
func TestHelp(t *testing.T) {
	for _, arg := range []string{"-h", "-help", "help"} {
		out := runMain(t, arg)
		if !strings.HasPrefix(out, "Usage: limiter") {
			t.Fatalf("limiter %s does not start with its usage:\n%s", arg, out)
		}
		for _, v := range config.Vars(config.LimiterProcess) {
			if !strings.Contains(out, "\n  "+v.Name) {
				t.Errorf("limiter %s does not list %s", arg, v.Name)
			}
		}
	}
}

// The rules subcommand keeps its own help.
func TestRulesHelp(t *testing.T) {
	if out := runMain(t, "rules", "-h"); !strings.Contains(out, "rules check") || strings.Contains(out, "LISTEN_ADDR") {
		t.Fatalf("limiter rules -h:\n%s", out)
	}
}
