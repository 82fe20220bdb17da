//go:build !race

package limiter

const raceDetector = false
