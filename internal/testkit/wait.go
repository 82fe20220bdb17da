package testkit

import (
	"testing"
	"time"
)

// WaitFor polls cond until it holds, failing the test, with what it waited
// for, once timeout has passed. The timeout is a bound on a hang, never a
// measurement: pick it generous. Polling starts at a millisecond, so a
// condition about to hold costs no wait, and slows to 50 ms, so a long wait
// (a consumer group, a restart) does not spin.
func WaitFor(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	pause := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", timeout, what)
			return
		}
		time.Sleep(pause)
		pause = min(2*pause, 50*time.Millisecond)
	}
}

// AvoidWindowEnd waits past the end of the current fixed window of per when
// less than need is left of it. Fixed windows start at multiples of per
// since the Unix epoch (on Redis's clock, which is this machine's), so a
// test counting in an hour-long window for a few seconds starts anew
// mid-test once an hour: a test that reads a count back calls this first.
// It waits at most need: a minute window with a need of 15 s waits in a
// quarter of the runs, an hour window with a need of a minute in one run
// of 60. The window is reckoned on the epoch as the scripts reckon it, so
// a per that does not divide a day is placed right too.
func AvoidWindowEnd(tb testing.TB, per, need time.Duration) {
	tb.Helper()
	ms, perMs := time.Now().UnixMilli(), per.Milliseconds()
	if left := time.Duration(perMs-ms%perMs) * time.Millisecond; left < need {
		tb.Logf("waiting %v for the next window of %v", left, per)
		time.Sleep(left + 100*time.Millisecond)
	}
}

// AvoidHourEnd is AvoidWindowEnd for windows of an hour, or of a day (which
// ends on an hour's end too), and a test that counts in them for up to a
// minute, however loaded the machine: the guard of most tests that read a
// count back.
func AvoidHourEnd(tb testing.TB) {
	tb.Helper()
	AvoidWindowEnd(tb, time.Hour, time.Minute)
}
