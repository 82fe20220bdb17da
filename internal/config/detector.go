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
	e := &env{getenv: getenv}
	c := Detector{
		Common:     e.common("detector"),
		ListenAddr: e.listen(":8081"),
		GroupID:    e.str("DETECTOR_GROUP_ID", "ratewarden-detector"),
		BatchSize:  e.integer("DETECTOR_BATCH_SIZE", 500, 1, 100_000),
		BatchWait:  e.duration("DETECTOR_BATCH_WAIT", 20*time.Millisecond),
	}
	return c, e.err()
}
