package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// DevKafka is the configuration of cmd/devkafka, the development broker.
// Each variable has a flag that mirrors it and wins over it.
type DevKafka struct {
	ListenAddr     string
	AdvertisedAddr string // empty: the listen address (127.0.0.1 when it listens on all interfaces)
	DecisionsTopic string
	BansTopic      string
	OutcomesTopic  string
	AccessLogTopic string // empty: none
	Partitions     int
	DataDir        string // empty: memory only
	Retention      time.Duration
	RetentionBytes int64 // per partition
	LogLevel       string
	LogFormat      string
}

// LoadDevKafka reads devkafka's configuration from its flags (args) and
// getenv. It returns flag.ErrHelp when args ask for help.
func LoadDevKafka(args []string, getenv func(string) string) (DevKafka, error) {
	var c DevKafka
	e := newEnv(DevKafkaProcess, getenv)
	fs := flag.NewFlagSet(string(DevKafkaProcess), flag.ContinueOnError)
	fs.SetOutput(io.Discard)        // errors are returned, help is the caller's
	variable := map[string]string{} // flag -> variable
	for _, v := range Vars(DevKafkaProcess) {
		fs.String(v.Flag, "", v.Name)
		variable[v.Flag] = v.Name
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return c, err
		}
		return c, fmt.Errorf("%w (see -h)", err)
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q (see -h)", fs.Arg(0))
	}
	fs.Visit(func(f *flag.Flag) { e.flags[variable[f.Name]] = f.Value.String() })
	e.load(&dest{devKafka: &c})
	if c.BansTopic != "" && c.BansTopic == c.DecisionsTopic {
		e.fail(e.name("BANS_TOPIC"), "a topic other than the decisions topic", c.BansTopic)
	}
	if c.OutcomesTopic != "" && (c.OutcomesTopic == c.DecisionsTopic || c.OutcomesTopic == c.BansTopic) {
		e.fail(e.name("OUTCOMES_TOPIC"), "a topic other than the decisions and bans topics", c.OutcomesTopic)
	}
	if c.AccessLogTopic != "" && (c.AccessLogTopic == c.DecisionsTopic || c.AccessLogTopic == c.BansTopic || c.AccessLogTopic == c.OutcomesTopic) {
		e.fail(e.name("ACCESS_LOG_TOPIC"), "a topic other than the decisions, bans and outcomes topics", c.AccessLogTopic)
	}
	return c, e.err()
}

// devKafkaVars are devkafka's rows: its variables and their flags.
var devKafkaVars = []Var{
	{Name: "LISTEN_ADDR", Flag: "listen-addr", Default: "127.0.0.1:9092", Readers: devKafkaOnly,
		Meaning: "`host:port` to listen on",
		load:    bind(inDevKafka(func(c *DevKafka) *string { return &c.ListenAddr }), brokerAddr)},
	{Name: "ADVERTISED_ADDR", Flag: "advertised-addr", Readers: devKafkaOnly,
		DefaultDoc: "the listen address",
		Meaning:    "`host:port` clients are told to connect to; by default the listen address, with `127.0.0.1` for a host that means all interfaces",
		load:       bind(inDevKafka(func(c *DevKafka) *string { return &c.AdvertisedAddr }), optional(brokerAddr))},
	{Name: "DECISIONS_TOPIC", Flag: "decisions-topic", Default: "ratelimit.decisions", Readers: devKafkaOnly,
		Meaning: "decisions topic, created at start",
		load:    bind(inDevKafka(func(c *DevKafka) *string { return &c.DecisionsTopic }), topicName)},
	{Name: "BANS_TOPIC", Flag: "bans-topic", Default: "ratelimit.bans", Readers: devKafkaOnly,
		Meaning: "bans topic, created at start",
		load:    bind(inDevKafka(func(c *DevKafka) *string { return &c.BansTopic }), topicName)},
	{Name: "OUTCOMES_TOPIC", Flag: "outcomes-topic", Default: "ratelimit.outcomes", Readers: devKafkaOnly,
		Meaning: "outcomes topic, created at start",
		load:    bind(inDevKafka(func(c *DevKafka) *string { return &c.OutcomesTopic }), topicName)},
	{Name: "ACCESS_LOG_TOPIC", Flag: "access-log-topic", Readers: devKafkaOnly,
		Meaning: "a gateway access-log topic (the detector's `ACCESS_LOG_TOPIC`), created at start when set; empty: none",
		load:    bind(inDevKafka(func(c *DevKafka) *string { return &c.AccessLogTopic }), optional(topicName))},
	{Name: "DEVKAFKA_PARTITIONS", Flag: "partitions", Default: "12", Readers: devKafkaOnly,
		Meaning: "partitions per topic, 1 to 10 000",
		load:    bind(inDevKafka(func(c *DevKafka) *int { return &c.Partitions }), intBetween(1, 10_000))},
	{Name: "DEVKAFKA_DATA_DIR", Flag: "data-dir", Readers: devKafkaOnly,
		Meaning: "directory to persist topics, data and offsets across restarts; empty: memory only",
		load:    bind(inDevKafka(func(c *DevKafka) *string { return &c.DataDir }), text)},
	{Name: "DEVKAFKA_RETENTION", Flag: "retention", Default: "1h", Readers: devKafkaOnly,
		Meaning: "`retention.ms` of the topics, as a Go duration",
		load:    bind(inDevKafka(func(c *DevKafka) *time.Duration { return &c.Retention }), durationAtLeast(time.Millisecond, "30m or 1h"))},
	{Name: "DEVKAFKA_RETENTION_BYTES", Flag: "retention-bytes", Default: strconv.Itoa(256 << 20), Readers: devKafkaOnly,
		Meaning: "`retention.bytes` of the topics, per partition (256 MiB)",
		load:    bind(inDevKafka(func(c *DevKafka) *int64 { return &c.RetentionBytes }), positiveInt64("a positive number of bytes"))},
	{Name: "LOG_LEVEL", Flag: "log-level", Default: "info", Readers: devKafkaOnly,
		Meaning: "`debug`, `info`, `warn` or `error`",
		load:    bind(inDevKafka(func(c *DevKafka) *string { return &c.LogLevel }), oneOf("debug", "info", "warn", "error"))},
	{Name: "LOG_FORMAT", Flag: "log-format", Default: "json", Readers: devKafkaOnly,
		Meaning: "`json` or `console`",
		load:    bind(inDevKafka(func(c *DevKafka) *string { return &c.LogFormat }), oneOf("json", "console"))},
}

// brokerAddr parses the host:port of a broker, the port 0 to 65535.
func brokerAddr(v string) (string, error) {
	host, port, err := net.SplitHostPort(v)
	if err == nil {
		var n int
		if n, err = strconv.Atoi(port); err == nil && (n < 0 || n > 65535) {
			err = errors.New("port out of range")
		}
	}
	if err != nil || strings.ContainsAny(host, " /") {
		return v, expected("host:port such as 127.0.0.1:9092", v)
	}
	return v, nil
}

// topicName checks Kafka's rules for topic names.
func topicName(v string) (string, error) {
	valid := v != "" && v != "." && v != ".." && len(v) <= 249
	for _, r := range v {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			valid = false
		}
	}
	if !valid {
		return v, expected("a Kafka topic name (1-249 of a-z A-Z 0-9 . _ -)", v)
	}
	return v, nil
}

// optional accepts empty (unset) besides what parse accepts.
func optional[T any](parse func(string) (T, error)) func(string) (T, error) {
	return func(v string) (T, error) {
		if v == "" {
			var zero T
			return zero, nil
		}
		return parse(v)
	}
}
