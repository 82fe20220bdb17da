//go:build !race

package rlsapi_test

const raceDetector = false
