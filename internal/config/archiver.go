package config

import "time"

// DefaultDatabaseURL is DATABASE_URL's default: the local server, trust
// authentication, database ratewarden.
const DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/ratewarden?sslmode=disable"

// Archiver is the configuration of cmd/archiver. Of Common it reads Kafka,
// the topics, logging and shutdown: it uses no Redis and no rules.
type Archiver struct {
	Common
	ListenAddr      string
	DatabaseURL     string
	GroupID         string
	BatchSize       int
	Consumers       int
	FlushInterval   time.Duration
	RetentionDays   int
	PartitionsAhead int
}

// LoadArchiver reads the archiver's configuration through getenv.
func LoadArchiver(getenv func(string) string) (Archiver, error) {
	var c Archiver
	e := newEnv(ArchiverProcess, getenv)
	e.load(&dest{common: &c.Common, archiver: &c})
	return c, e.err()
}
