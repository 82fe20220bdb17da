//go:build race

package rlsapi_test

// raceDetector: sync.Pool drops a quarter of what it is given at random
// under the race detector, so allocation counts are not pinned then.
const raceDetector = true
