package config

import "time"

// Notifier is the configuration of cmd/notifier. Of Common it reads Kafka,
// the bans topic, logging and shutdown.
type Notifier struct {
	Common
	ListenAddr string
	GroupID    string
	// ReceiversFile is the YAML file of the webhooks to notify.
	ReceiversFile string
	// DigestDelay is the length of a digest's window; DigestGrace how long
	// after its end a window waits for messages still on their way.
	DigestDelay time.Duration
	DigestGrace time.Duration
	// MaxPending bounds the messages read and not yet committed.
	MaxPending int
	// MaxDigests bounds the digests a receiver gets of one window.
	MaxDigests int
	// Timeout bounds one request to a receiver; MaxBackoff the wait
	// between two.
	Timeout    time.Duration
	MaxBackoff time.Duration
}

// LoadNotifier reads the notifier's configuration through getenv. The
// receivers file, which the notifier requires, is read and checked by the
// notifier at start.
func LoadNotifier(getenv func(string) string) (Notifier, error) {
	var c Notifier
	e := newEnv(NotifierProcess, getenv)
	e.load(&dest{common: &c.Common, notifier: &c})
	return c, e.err()
}
