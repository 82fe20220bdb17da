package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	rwconfig "github.com/ratewarden/ratewarden/internal/config"
)

type config struct {
	broker    brokerConfig
	logLevel  zapcore.Level
	logFormat string
}

// loadConfig reads devkafka's variables and the flags that mirror them
// (internal/config's table). It returns flag.ErrHelp after writing the help
// to stderr when args ask for it among other flags.
func loadConfig(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	c, err := rwconfig.LoadDevKafka(args, getenv)
	if errors.Is(err, flag.ErrHelp) {
		_, _ = io.WriteString(stderr, usage)
		rwconfig.WriteVars(stderr, rwconfig.DevKafkaProcess)
		return config{}, err
	}
	if err != nil {
		return config{}, err
	}
	level, err := zapcore.ParseLevel(c.LogLevel)
	if err != nil {
		return config{}, fmt.Errorf("LOG_LEVEL: %w", err) // the table allows only levels zap knows
	}
	return config{
		broker: brokerConfig{
			ListenAddr:      c.ListenAddr,
			AdvertisedAddr:  c.AdvertisedAddr,
			DecisionsTopic:  c.DecisionsTopic,
			BansTopic:       c.BansTopic,
			OutcomesTopic:   c.OutcomesTopic,
			AccessLogTopic:  c.AccessLogTopic,
			Partitions:      c.Partitions,
			DataDir:         c.DataDir,
			Retention:       c.Retention,
			RetentionBytes:  c.RetentionBytes,
			CleanerInterval: defaultCleanerInterval,
		},
		logLevel:  level,
		logFormat: c.LogFormat,
	}, nil
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
