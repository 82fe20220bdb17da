//go:build race

package lease_test

// raceDetector: the race detector slows the single-goroutine simulations
// tenfold and finds nothing in them; they run fewer sequences under it.
const raceDetector = true
