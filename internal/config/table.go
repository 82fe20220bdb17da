package config

import (
	"os"
	"slices"
	"time"
)

// table is every variable any process reads, one row per variable and
// group of processes; the order is the documentation's.
var table = slices.Concat(serviceVars, limiterVars, xdsVars, consumerVars, notifierVars, consoleVars, devKafkaVars)

// The groups of processes rows are read by.
var (
	limiterOnly  = []Process{LimiterProcess}
	detectorOnly = []Process{DetectorProcess}
	archiverOnly = []Process{ArchiverProcess}
	notifierOnly = []Process{NotifierProcess}
	devKafkaOnly = []Process{DevKafkaProcess}
	consoleOnly  = []Process{ConsoleProcess}
	// redisUsers use Redis and the rules file.
	redisUsers = []Process{LimiterProcess, DetectorProcess}
	services   = []Process{LimiterProcess, DetectorProcess, ArchiverProcess}
	// banReaders are the services and the notifier, which reads the bans
	// topic alone.
	banReaders = []Process{LimiterProcess, DetectorProcess, ArchiverProcess, NotifierProcess}
	// processes are those and the console: they log and stop alike.
	processes = []Process{LimiterProcess, DetectorProcess, ArchiverProcess, NotifierProcess, ConsoleProcess}
)

// hostname is INSTANCE_ID's default: the host name, else the process's.
func hostname(p Process) string {
	if h, _ := os.Hostname(); h != "" {
		return h
	}
	return string(p)
}

// serviceVars are the rows of the services' listeners and of what they
// share: Redis, Kafka, rules, logs, identity and shutdown.
var serviceVars = []Var{
	{Name: "LISTEN_ADDR", Default: ":8080", Readers: limiterOnly,
		Meaning: "API, `/metrics`, `/healthz`, `/readyz` (with `OPS_LISTEN_ADDR`: the API and `/healthz` only)",
		load:    bind(inLimiter(func(c *Limiter) *string { return &c.ListenAddr }), listenAddr)},
	{Name: "LISTEN_ADDR", Default: ":8081", Readers: detectorOnly,
		Meaning: "`/metrics`, `/healthz`, `/readyz` (ready when Redis and Kafka answer)",
		load:    bind(inDetector(func(c *Detector) *string { return &c.ListenAddr }), listenAddr)},
	{Name: "LISTEN_ADDR", Default: ":8082", Readers: archiverOnly,
		Meaning: "`/metrics`, `/healthz`, `/readyz` (ready when Postgres and Kafka answer)",
		load:    bind(inArchiver(func(c *Archiver) *string { return &c.ListenAddr }), listenAddr)},
	{Name: "LISTEN_ADDR", Default: ":8084", Readers: notifierOnly,
		Meaning: "`/metrics`, `/healthz`, `/readyz` (ready when Kafka answers)",
		load:    bind(inNotifier(func(c *Notifier) *string { return &c.ListenAddr }), listenAddr)},

	{Name: "REDIS_URL", Default: "redis://127.0.0.1:6379/0", Readers: redisUsers,
		Meaning: "Redis for decisions (and the detector's windows and bans)",
		load:    bind(inCommon(func(c *Common) *string { return &c.RedisURL }), text)},
	{Name: "REDIS_CLUSTER_ADDRS", Readers: redisUsers,
		Meaning: "comma-separated `host:port` seed list: use Redis Cluster instead of `REDIS_URL` (see [Scale-out](operations.md#scale-out-redis-cluster-kafka-partitions-several-instances))",
		load:    bind(inCommon(func(c *Common) *[]string { return &c.RedisClusterAddrs }), hostPorts)},
	{Name: "REDIS_SENTINEL_ADDRS", Readers: redisUsers,
		Meaning: "Sentinel `host:port` list (with `REDIS_SENTINEL_MASTER`, both or neither): follow failovers; password and db come from `REDIS_URL`",
		load:    bind(inCommon(func(c *Common) *[]string { return &c.RedisSentinelAddrs }), hostPorts)},
	{Name: "REDIS_SENTINEL_MASTER", Readers: redisUsers,
		Meaning: "the master name Sentinel knows the primary by (with `REDIS_SENTINEL_ADDRS`, both or neither)",
		load:    bind(inCommon(func(c *Common) *string { return &c.RedisSentinelMaster }), text)},
	{Name: "REDIS_KEY_PREFIX", Default: "rw:", Readers: redisUsers,
		Meaning: "prefix of every key the limiter writes (the detector's must be the same: it writes the bans the limiters read)",
		load:    bind(inCommon(func(c *Common) *string { return &c.RedisKeyPrefix }), text)},
	{Name: "REDIS_TIMEOUT", Default: "50ms", Readers: limiterOnly,
		Meaning: "deadline of one decision round trip (health checks and the warm-up have `REDIS_CHECK_TIMEOUT`); past it the rules' `on_redis_failure` applies, " +
			"except that a `local` rule refuses a request whose round trip timed out (see [Failure modes](operations.md#failure-modes))",
		load: bind(inCommon(func(c *Common) *time.Duration { return &c.RedisTimeout }), positiveDuration)},
	{Name: "REDIS_TIMEOUT", Default: "50ms", Readers: detectorOnly,
		Meaning: "deadline of one Redis call, raised to `2s` when shorter: detection batches are pipelined and on no request's path",
		load:    bind(inCommon(func(c *Common) *time.Duration { return &c.RedisTimeout }), positiveDuration)},

	{Name: "KAFKA_BROKERS", Default: "127.0.0.1:9092", Readers: banReaders,
		Meaning: "comma-separated brokers",
		load:    bind(inCommon(func(c *Common) *[]string { return &c.KafkaBrokers }), hostPorts)},
	{Name: "DECISIONS_TOPIC", Default: "ratelimit.decisions", Readers: services,
		Meaning: "topic of the decision events",
		load:    bind(inCommon(func(c *Common) *string { return &c.DecisionsTopic }), text)},
	{Name: "BANS_TOPIC", Default: "ratelimit.bans", Readers: banReaders,
		Meaning: "topic of bans, unbans and warnings",
		load:    bind(inCommon(func(c *Common) *string { return &c.BansTopic }), text)},
	{Name: "OUTCOMES_TOPIC", Default: "ratelimit.outcomes", Readers: services,
		Meaning: "topic of the outcome reports (`POST /v1/report`)",
		load:    bind(inCommon(func(c *Common) *string { return &c.OutcomesTopic }), text)},

	{Name: "RULES_FILE", Default: "deploy/rules.example.yaml", Readers: redisUsers,
		Meaning: "the rules file (the detector reads its `detection:` and `exempt:` sections)",
		load:    bind(inCommon(func(c *Common) *string { return &c.RulesFile }), text)},
	{Name: "USER_IDS_CASE_SENSITIVE", Default: "false", Readers: redisUsers,
		Meaning: "`true`: user ids are compared exactly as sent, for systems whose ids are case-sensitive; by default every " +
			"spelling of one id (case, Unicode compatibility forms: `Dave`, `dave`, `ｄａｖｅ`) is one account in rules keyed by " +
			"`user_id`, user bans, exemptions and detection. The limiters' and the detector's must be the same " +
			"(see [User ids](rules.md#user-ids-one-account-however-spelled))",
		load: bind(inCommon(func(c *Common) *bool { return &c.CaseSensitiveUserIDs }), boolean)},
	{Name: "DATABASE_URL", Default: DefaultDatabaseURL, Readers: []Process{LimiterProcess, ArchiverProcess},
		Meaning: "Postgres: the limiter's dynamic rules, the archiver's tables for analysts; created with its schema if missing",
		load: bind(either(inLimiter(func(c *Limiter) *string { return &c.DatabaseURL }),
			inArchiver(func(c *Archiver) *string { return &c.DatabaseURL })), text)},
	{Name: "INSTANCE_ID", DefaultDoc: "host name", Readers: redisUsers, defaultFunc: hostname,
		Meaning: "names this instance (the limiter's decision events carry it); at most 256 bytes (the bound of the event's `instance`)",
		load:    bind(inCommon(func(c *Common) *string { return &c.Instance }), instanceID)},
	{Name: "LOG_LEVEL", Default: "info", Readers: processes,
		Meaning: "`debug`, `info`, `warn` or `error`",
		load:    bind(inCommon(func(c *Common) *string { return &c.LogLevel }), oneOf("debug", "info", "warn", "error"))},
	{Name: "LOG_FORMAT", Default: "json", Readers: processes,
		Meaning: "`json` or `console`",
		load:    bind(inCommon(func(c *Common) *string { return &c.LogFormat }), oneOf("json", "console"))},
	{Name: "SHUTDOWN_TIMEOUT", Default: "10s", Readers: processes,
		Meaning: "bound on the stop at SIGTERM: draining requests and flushing events (the limiter), finishing the batch in hand (the consumers)",
		load:    bind(inCommon(func(c *Common) *time.Duration { return &c.ShutdownTimeout }), positiveDuration)},
}
