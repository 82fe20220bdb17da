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
// since the epoch (on Redis's clock, which is this machine's), so a test
// counting in an hour-long window for a few seconds starts anew mid-test
// once an hour: a test that reads a count back calls this first.
func AvoidWindowEnd(tb testing.TB, per, need time.Duration) {
	tb.Helper()
	now := time.Now()
	if left := now.Truncate(per).Add(per).Sub(now); left < need {
		tb.Logf("waiting %v for the next window of %v", left.Round(time.Millisecond), per)
		time.Sleep(left + 100*time.Millisecond)
	}
}
