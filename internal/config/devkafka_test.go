package config

import (
	"errors"
	"flag"
	"strings"
	"testing"
	"time"
)

func TestLoadDevKafka(t *testing.T) {
	c, err := LoadDevKafka(nil, mapEnv(nil))
	want := DevKafka{ListenAddr: "127.0.0.1:9092", DecisionsTopic: "ratelimit.decisions", BansTopic: "ratelimit.bans", OutcomesTopic: "ratelimit.outcomes",
		Partitions: 12, Retention: time.Hour, RetentionBytes: 256 << 20, LogLevel: "info", LogFormat: "json"}
	if err != nil || c != want {
		t.Fatalf("defaults %+v, %v; want %+v", c, err, want)
	}
	// Flags win over the environment.
	c, err = LoadDevKafka([]string{"-partitions", "3", "-data-dir=/tmp/dk"},
		mapEnv(map[string]string{"DEVKAFKA_PARTITIONS": "7", "LISTEN_ADDR": "127.0.0.1:19092", "DEVKAFKA_RETENTION": "10m"}))
	if err != nil || c.Partitions != 3 || c.DataDir != "/tmp/dk" || c.ListenAddr != "127.0.0.1:19092" || c.Retention != 10*time.Minute {
		t.Fatalf("config %+v, %v", c, err)
	}
	if _, err := LoadDevKafka([]string{"-h"}, mapEnv(nil)); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v, want flag.ErrHelp", err)
	}
}

// An error names the flag when the flag was given, else the variable.
func TestLoadDevKafkaErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"listen addr without port", nil, map[string]string{"LISTEN_ADDR": "127.0.0.1"}, "LISTEN_ADDR: expected host:port"},
		{"listen flag", []string{"-listen-addr", "127.0.0.1:99999"}, nil, "-listen-addr: expected host:port"},
		{"advertised", nil, map[string]string{"ADVERTISED_ADDR": "a b:1"}, "ADVERTISED_ADDR: expected host:port"},
		{"partitions zero", []string{"-partitions", "0"}, nil, `-partitions: expected an integer between 1 and 10000, got "0"`},
		{"partitions env", nil, map[string]string{"DEVKAFKA_PARTITIONS": "-3"}, "DEVKAFKA_PARTITIONS: expected"},
		{"retention", []string{"-retention", "forever"}, nil, "-retention: expected a duration of at least 1ms"},
		{"sub-millisecond retention", nil, map[string]string{"DEVKAFKA_RETENTION": "500us"}, "DEVKAFKA_RETENTION: expected"},
		{"retention bytes", nil, map[string]string{"DEVKAFKA_RETENTION_BYTES": "1GB"}, "DEVKAFKA_RETENTION_BYTES: expected a positive number of bytes"},
		{"topic name", nil, map[string]string{"DECISIONS_TOPIC": "bad topic"}, "DECISIONS_TOPIC: expected a Kafka topic name"},
		{"same topics", nil, map[string]string{"BANS_TOPIC": "ratelimit.decisions"}, "BANS_TOPIC: expected a topic other than"},
		{"same topics by flag", []string{"-decisions-topic", "t", "-bans-topic", "t"}, nil, "-bans-topic: expected a topic other than"},
		{"access-log topic", nil, map[string]string{"ACCESS_LOG_TOPIC": "ratelimit.outcomes"}, "ACCESS_LOG_TOPIC: expected a topic other than"},
		{"access-log topic name", []string{"-access-log-topic", "a b"}, nil, "-access-log-topic: expected a Kafka topic name"},
		{"log level", nil, map[string]string{"LOG_LEVEL": "loud"}, "LOG_LEVEL: expected one of debug"},
		{"unknown flag", []string{"-nope"}, nil, "-nope"},
		{"stray argument", []string{"serve"}, nil, `unexpected argument "serve"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadDevKafka(tt.args, mapEnv(tt.env))
			if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("want one line with %q, got %v", tt.want, err)
			}
		})
	}
}
