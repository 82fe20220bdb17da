package config

import "time"

// DefaultDatabaseURL is DATABASE_URL's default: the local server, trust
// authentication, database ratewarden.
const DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/ratewarden?sslmode=disable"

// Archiver is the configuration of cmd/archiver.
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
	e := &env{getenv: getenv}
	c := Archiver{
		Common:          e.common("archiver"),
		ListenAddr:      e.listen(":8082"),
		DatabaseURL:     e.str("DATABASE_URL", DefaultDatabaseURL),
		GroupID:         e.str("ARCHIVER_GROUP_ID", "ratewarden-archiver"),
		BatchSize:       e.integer("ARCHIVER_BATCH_SIZE", 1000, 1, 100_000),
		Consumers:       e.integer("ARCHIVER_CONSUMERS", 3, 1, 64),
		FlushInterval:   e.duration("ARCHIVER_FLUSH_INTERVAL", time.Second),
		RetentionDays:   e.integer("RETENTION_DAYS", 30, 1, 36_500),
		PartitionsAhead: e.integer("PARTITIONS_AHEAD", 3, 1, 60),
	}
	return c, e.err()
}
