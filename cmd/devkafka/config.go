package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

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
