// Package benchenv reads the knobs of the bench-tagged tests from the
// environment (BENCH_DURATION and the like): the value, or the default
// when the variable is unset; a value that cannot be right fails the test.
package benchenv

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// String returns the variable name, or def when it is unset or empty.
func String(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// Int returns the positive integer in the variable name, or def.
func Int(tb testing.TB, name string, def int) int {
	tb.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		tb.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// Duration returns the positive duration in the variable name, or def.
func Duration(tb testing.TB, name string, def time.Duration) time.Duration {
	tb.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		tb.Fatalf("%s=%q: want a positive duration", name, v)
	}
	return d
}
