package config

import (
	"fmt"
	"time"

	"github.com/ratewarden/ratewarden/internal/accesslog"
)

// Detector is the configuration of cmd/detector.
type Detector struct {
	Common
	ListenAddr string
	GroupID    string
	BatchSize  int
	BatchWait  time.Duration
	// AccessLogTopic is the topic of gateway access-log lines the detector
	// reads outcomes from; "" when it reads none.
	AccessLogTopic string
	// AccessLogFields names the JSON fields of those lines.
	AccessLogFields accesslog.Mapping
	// RulesPoll is how often the rules file is read for changes.
	RulesPoll time.Duration
}

// LoadDetector reads the detector's configuration through getenv.
func LoadDetector(getenv func(string) string) (Detector, error) {
	var c Detector
	e := newEnv(DetectorProcess, getenv)
	e.load(&dest{common: &c.Common, detector: &c})
	e.redisTopology(c.Common)
	e.accessLogTopic(c)
	return c, e.err()
}

// accessLogTopic refuses an access-log topic that is one of the topics of
// events: its messages would be parsed as access-log lines, all refused.
func (e *env) accessLogTopic(c Detector) {
	if c.AccessLogTopic == "" {
		return
	}
	for _, other := range []struct{ name, topic string }{
		{"DECISIONS_TOPIC", c.DecisionsTopic}, {"BANS_TOPIC", c.BansTopic}, {"OUTCOMES_TOPIC", c.OutcomesTopic},
	} {
		if c.AccessLogTopic == other.topic {
			e.errs = append(e.errs, fmt.Errorf("%s: %q is also %s; access-log lines need a topic of their own",
				e.name("ACCESS_LOG_TOPIC"), c.AccessLogTopic, other.name))
		}
	}
}
