package config

import (
	"time"

	"github.com/ratewarden/ratewarden/internal/accesslog"
)

// consumerVars are the rows of the detector and the archiver, the
// consumers of the topics.
var consumerVars = []Var{
	{Name: "DETECTOR_GROUP_ID", Default: "ratewarden-detector", Readers: detectorOnly,
		Meaning: "consumer group on the decisions topic; instances in one group share the partitions",
		load:    bind(inDetector(func(c *Detector) *string { return &c.GroupID }), text)},
	{Name: "DETECTOR_BATCH_SIZE", Default: "500", Readers: detectorOnly,
		Meaning: "events handled (and Redis calls pipelined) per batch, 1 to 100 000",
		load:    bind(inDetector(func(c *Detector) *int { return &c.BatchSize }), intBetween(1, 100_000))},
	{Name: "DETECTOR_BATCH_WAIT", Default: "20ms", Readers: detectorOnly,
		Meaning: "how long a batch waits to fill once it has an event",
		load:    bind(inDetector(func(c *Detector) *time.Duration { return &c.BatchWait }), positiveDuration)},
	{Name: "ACCESS_LOG_TOPIC", Readers: detectorOnly,
		Meaning: "topic of gateway access-log lines, one JSON object each, read as outcomes " +
			"(see [the nginx recipe](../deploy/gateways/README.md#access-logs-as-outcomes)); empty: none is read. " +
			"devkafka and the compose file create it when set; on another broker create it first (the detector warns while it waits)",
		load: bind(inDetector(func(c *Detector) *string { return &c.AccessLogTopic }), text)},
	{Name: "ACCESS_LOG_FIELDS", Default: accesslog.DefaultMappingText, Readers: detectorOnly,
		Meaning: "the JSON fields of an access-log line, as comma-separated `key=field` pairs; keys: `ip`, `path`, `status` (required), " +
			"`user`, `method`, `bytes`, `cost` (`cost=bytes`: the bytes sent), `time`, `tier`; a key left out keeps its default, `key=` turns it off",
		load: bind(inDetector(func(c *Detector) *accesslog.Mapping { return &c.AccessLogFields }), accessLogFields)},

	{Name: "ARCHIVER_GROUP_ID", Default: "ratewarden-archiver", Readers: archiverOnly,
		Meaning: "consumer group on its three topics (decisions, bans, outcomes)",
		load:    bind(inArchiver(func(c *Archiver) *string { return &c.GroupID }), text)},
	{Name: "ARCHIVER_BATCH_SIZE", Default: "1000", Readers: archiverOnly,
		Meaning: "messages per transaction, 1 to 100 000 (most decisions are allowed and not stored, so rows per transaction are fewer)",
		load:    bind(inArchiver(func(c *Archiver) *int { return &c.BatchSize }), intBetween(1, 100_000))},
	{Name: "ARCHIVER_FLUSH_INTERVAL", Default: "1s", Readers: archiverOnly,
		Meaning: "a batch is written when full or this long after its first message",
		load:    bind(inArchiver(func(c *Archiver) *time.Duration { return &c.FlushInterval }), positiveDuration)},
	{Name: "ARCHIVER_CONSUMERS", Default: "3", Readers: archiverOnly,
		Meaning: "consumers of the decisions topic in the process, and as many of the outcomes topic, 1 to 64 (they split its partitions, so decoding one batch overlaps writing another)",
		load:    bind(inArchiver(func(c *Archiver) *int { return &c.Consumers }), intBetween(1, 64))},
	{Name: "RETENTION_DAYS", Default: "30", Readers: archiverOnly,
		Meaning: "daily partitions older than this are dropped, and dead letters received longer ago deleted (checked at start and hourly)",
		load:    bind(inArchiver(func(c *Archiver) *int { return &c.RetentionDays }), intBetween(1, 36_500))},
	{Name: "PARTITIONS_AHEAD", Default: "3", Readers: archiverOnly,
		Meaning: "daily partitions created ahead of time, 1 to 60",
		load:    bind(inArchiver(func(c *Archiver) *int { return &c.PartitionsAhead }), intBetween(1, 60))},
}
