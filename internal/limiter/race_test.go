//go:build race

package limiter

// raceDetector: the race detector changes what allocates (sync.Pool drops
// objects at random, instrumented code escapes more), so allocation counts
// are not checked then.
const raceDetector = true
