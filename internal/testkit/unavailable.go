package testkit

import (
	"fmt"
	"os"
	"testing"
)

// Unavailable ends a test that needs something this machine does not have
// (a Redis or PostgreSQL that does not answer, a program not installed):
// skipped with the message, so that `go test ./...` on a machine without
// the services runs the unit tests alone, unless CI is set: CI must run
// every test, so there it fails.
func Unavailable(tb testing.TB, format string, args ...any) {
	tb.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") != "" {
		tb.Fatalf("%s (CI is set: every test must run)", msg)
		return
	}
	tb.Skipf("skipped: %s (CI unset)", msg)
}
