//go:build !race

package lease_test

const raceDetector = false
