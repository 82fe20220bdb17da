package config

import "time"

// Detector is the configuration of cmd/detector.
type Detector struct {
	Common
	ListenAddr string
	GroupID    string
	BatchSize  int
	BatchWait  time.Duration
}

// LoadDetector reads the detector's configuration through getenv.
func LoadDetector(getenv func(string) string) (Detector, error) {
	var c Detector
	e := newEnv(DetectorProcess, getenv)
	e.load(&dest{common: &c.Common, detector: &c})
	e.redisTopology(c.Common)
	return c, e.err()
}
