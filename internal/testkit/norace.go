//go:build !race

package testkit

// RaceDetector tells whether the test binary was built with -race (see
// race.go).
const RaceDetector = false
