//go:build race

package testkit

// RaceDetector tells whether the test binary was built with -race. Under
// it sync.Pool drops objects at random and instrumented code escapes more,
// so the tests that pin allocations skip themselves, and it slows
// single-goroutine simulations tenfold, so those run fewer sequences.
const RaceDetector = true
