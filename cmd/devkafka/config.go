package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

type config struct {
	broker    brokerConfig
	logLevel  zapcore.Level
	logFormat string
}

// setting is one configuration value with its flag, its environment
// variable (may be empty) and its default; flags win over the environment.
type setting struct {
	flag, env, def, usage string
	value                 string // the flag's value as given
	set                   bool   // the flag was given
}

// resolve returns the effective value and the name to blame in errors.
func (s *setting) resolve(getenv func(string) string) (value, name string) {
	if s.set {
		return s.value, "-" + s.flag
	}
	if s.env != "" {
		if v := getenv(s.env); v != "" {
			return v, s.env
		}
	}
	return s.def, "-" + s.flag
}

func loadConfig(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	settings := []*setting{
		{flag: "listen-addr", env: "LISTEN_ADDR", def: "127.0.0.1:9092", usage: "host:port to listen on"},
		{flag: "advertised-addr", env: "ADVERTISED_ADDR", usage: "host:port clients are told to connect to (default: the listen address; 127.0.0.1 when it listens on all interfaces)"},
		{flag: "decisions-topic", env: "DECISIONS_TOPIC", def: "ratelimit.decisions", usage: "decisions topic"},
		{flag: "bans-topic", env: "BANS_TOPIC", def: "ratelimit.bans", usage: "bans topic"},
		{flag: "partitions", env: "DEVKAFKA_PARTITIONS", def: "12", usage: "partitions per topic"},
		{flag: "data-dir", env: "DEVKAFKA_DATA_DIR", usage: "directory to persist topics, data and offsets (default: memory only)"},
		{flag: "retention", env: "DEVKAFKA_RETENTION", def: "1h", usage: "retention.ms of the topics, as a Go duration"},
		{flag: "retention-bytes", env: "DEVKAFKA_RETENTION_BYTES", def: strconv.Itoa(256 << 20), usage: "retention.bytes of the topics, per partition"},
		{flag: "log-level", env: "LOG_LEVEL", def: "info", usage: "debug, info, warn or error"},
		{flag: "log-format", env: "LOG_FORMAT", def: "json", usage: "json or console"},
	}
	fs := flag.NewFlagSet("devkafka", flag.ContinueOnError)
	fs.SetOutput(stderr)
	byFlag := map[string]*setting{}
	for _, s := range settings {
		usage := s.usage
		if s.env != "" {
			usage += " (env " + s.env + ")"
		}
		fs.StringVar(&s.value, s.flag, s.def, usage)
		byFlag[s.flag] = s
	}
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	fs.Visit(func(f *flag.Flag) { byFlag[f.Name].set = true })
	get := func(flagName string) (string, string) { return byFlag[flagName].resolve(getenv) }

	var cfg config
	var err error
	b := &cfg.broker
	b.CleanerInterval = defaultCleanerInterval
	if b.ListenAddr, err = parseHostPort(get("listen-addr")); err != nil {
		return config{}, err
	}
	if v, name := get("advertised-addr"); v != "" {
		if b.AdvertisedAddr, err = parseHostPort(v, name); err != nil {
			return config{}, err
		}
	}
	if b.DecisionsTopic, err = parseTopic(get("decisions-topic")); err != nil {
		return config{}, err
	}
	if b.BansTopic, err = parseTopic(get("bans-topic")); err != nil {
		return config{}, err
	}
	if v, name := get("bans-topic"); v == b.DecisionsTopic {
		return config{}, fmt.Errorf("invalid %s %q: expected a topic other than the decisions topic", name, v)
	}
	b.DataDir, _ = get("data-dir")

	v, name := get("partitions")
	if b.Partitions, err = strconv.Atoi(v); err != nil || b.Partitions < 1 || b.Partitions > 10000 {
		return config{}, fmt.Errorf("invalid %s %q: expected an integer from 1 to 10000", name, v)
	}
	v, name = get("retention")
	if b.Retention, err = time.ParseDuration(v); err != nil || b.Retention < time.Millisecond {
		return config{}, fmt.Errorf("invalid %s %q: expected a positive Go duration such as 30m or 1h", name, v)
	}
	v, name = get("retention-bytes")
	if b.RetentionBytes, err = strconv.ParseInt(v, 10, 64); err != nil || b.RetentionBytes < 1 {
		return config{}, fmt.Errorf("invalid %s %q: expected a positive number of bytes", name, v)
	}
	v, name = get("log-level")
	if cfg.logLevel, err = zapcore.ParseLevel(v); err != nil || cfg.logLevel < zap.DebugLevel || cfg.logLevel > zap.ErrorLevel {
		return config{}, fmt.Errorf("invalid %s %q: expected debug, info, warn or error", name, v)
	}
	v, name = get("log-format")
	if v != "json" && v != "console" {
		return config{}, fmt.Errorf("invalid %s %q: expected json or console", name, v)
	}
	cfg.logFormat = v
	return cfg, nil
}

func parseHostPort(v, name string) (string, error) {
	host, port, err := net.SplitHostPort(v)
	if err == nil {
		var n int
		n, err = strconv.Atoi(port)
		if err == nil && (n < 0 || n > 65535) {
			err = fmt.Errorf("port out of range")
		}
	}
	if err != nil || strings.ContainsAny(host, " /") {
		return "", fmt.Errorf("invalid %s %q: expected host:port such as 127.0.0.1:9092", name, v)
	}
	return v, nil
}

// parseTopic checks Kafka's rules for topic names.
func parseTopic(v, name string) (string, error) {
	valid := v != "" && v != "." && v != ".." && len(v) <= 249
	for _, r := range v {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			valid = false
		}
	}
	if !valid {
		return "", fmt.Errorf("invalid %s %q: expected a Kafka topic name (1-249 of a-z A-Z 0-9 . _ -)", name, v)
	}
	return v, nil
}

func newLogger(level zapcore.Level, format string, w io.Writer) (*zap.Logger, error) {
	encCfg := zap.NewProductionEncoderConfig()
	encCfg.EncodeTime = zapcore.ISO8601TimeEncoder
	var enc zapcore.Encoder
	switch format {
	case "json":
		enc = zapcore.NewJSONEncoder(encCfg)
	case "console":
		enc = zapcore.NewConsoleEncoder(encCfg)
	default:
		return nil, fmt.Errorf("unknown log format %q", format)
	}
	core := zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(w)), level)
	return zap.New(core).With(zap.String("service", "devkafka")), nil
}
