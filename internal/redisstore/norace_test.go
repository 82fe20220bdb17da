//go:build !race

package redisstore

const raceDetector = false
