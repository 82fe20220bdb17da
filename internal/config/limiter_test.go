package config

import (
	"strings"
	"testing"
	"time"
)

func mapEnv(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestLoadLimiterDefaults(t *testing.T) {
	c, err := LoadLimiter(mapEnv(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.ListenAddr != ":8080" || c.RedisURL != "redis://127.0.0.1:6379/0" ||
		c.DecisionsTopic != "ratelimit.decisions" || c.BansTopic != "ratelimit.bans" ||
		c.RulesFile != "deploy/rules.example.yaml" || c.AuthDenyStatus != 429 || c.MaxConnections != 10_000 ||
		c.RedisTimeout != 50*time.Millisecond || len(c.KafkaBrokers) != 1 || c.KafkaBrokers[0] != "127.0.0.1:9092" {
		t.Fatalf("unexpected defaults: %+v", c)
	}
	if c.RedisWarmup != 5*time.Second || c.RedisHealthInterval != 5*time.Second || c.RedisFailedChecks != 3 || c.RedisBreakerFailures != 5 ||
		c.RedisRecoverAfter != time.Minute || c.PermissiveAfter != 5*time.Minute || c.PermissiveDenyRules ||
		c.RedisCheckTimeout != time.Second || c.LocalExpectedInstances != 1 || c.LocalStateDir != "" {
		t.Fatalf("unexpected redis failure defaults: %+v", c)
	}
	if !c.DynamicRules || c.DatabaseURL != DefaultDatabaseURL || c.RulesPoll != time.Second {
		t.Fatalf("unexpected dynamic rules defaults: %+v", c)
	}
	if c.OverLimitCache != 100_000 || c.PprofAddr != "" || c.RedisPipelines != 4 || c.PipelineWindow != 0 || c.PipelineWait != 200*time.Microsecond {
		t.Fatalf("unexpected performance defaults: %+v", c)
	}
	want := RLS{GRPCListenAddr: ":8083", MaxConnections: 1024, LimitHeader: "RateLimit-Limit", RemainingHeader: "RateLimit-Remaining",
		ResetHeader: "RateLimit-Reset", AddressKey: "remote_address", EndpointKey: "path"}
	if c.RLS != want {
		t.Fatalf("rate limit API defaults %+v, want %+v", c.RLS, want)
	}
}

func TestLoadLimiterRLSValues(t *testing.T) {
	c, err := LoadLimiter(mapEnv(map[string]string{
		"GRPC_LISTEN_ADDR":               "off",
		"GRPC_MAX_CONNECTION_AGE":        "10m",
		"GRPC_MAX_CONNECTION_AGE_GRACE":  "30s",
		"GRPC_MAX_CONNECTIONS":           "64",
		"LIMIT_RESPONSE_HEADERS_ENABLED": "true",
		"LIMIT_LIMIT_HEADER":             "X-RateLimit-Limit",
		"SHADOW_MODE":                    "true",
		"RLS_ADDRESS_KEY":                "client_ip",
	}))
	if err != nil {
		t.Fatal(err)
	}
	want := RLS{MaxConnectionAge: 10 * time.Minute, MaxConnectionAgeGrace: 30 * time.Second, MaxConnections: 64, ResponseHeaders: true,
		LimitHeader: "X-RateLimit-Limit", RemainingHeader: "RateLimit-Remaining", ResetHeader: "RateLimit-Reset",
		ShadowMode: true, AddressKey: "client_ip", EndpointKey: "path"}
	if c.RLS != want {
		t.Fatalf("rate limit API settings %+v, want %+v", c.RLS, want)
	}
}

func TestLoadLimiterRedisFailureValues(t *testing.T) {
	c, err := LoadLimiter(mapEnv(map[string]string{
		"REDIS_WARMUP_TIMEOUT":          "30s",
		"REDIS_HEALTH_INTERVAL":         "200ms",
		"REDIS_FAILED_CHECKS":           "2",
		"REDIS_BREAKER_FAILURES":        "10",
		"REDIS_RECOVER_AFTER":           "1s",
		"PERMISSIVE_AFTER":              "0",
		"LIMITER_PERMISSIVE_DENY_RULES": "true",
		"REDIS_CHECK_TIMEOUT":           "2s",
		"LOCAL_EXPECTED_INSTANCES":      "3",
		"LOCAL_STATE_DIR":               "/var/lib/ratewarden",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if c.RedisWarmup != 30*time.Second || c.RedisHealthInterval != 200*time.Millisecond || c.RedisFailedChecks != 2 || c.RedisBreakerFailures != 10 ||
		c.RedisRecoverAfter != time.Second || c.PermissiveAfter != 0 || !c.PermissiveDenyRules ||
		c.RedisCheckTimeout != 2*time.Second || c.LocalExpectedInstances != 3 || c.LocalStateDir != "/var/lib/ratewarden" {
		t.Fatalf("unexpected config: %+v", c)
	}
}

func TestLoadLimiterValues(t *testing.T) {
	c, err := LoadLimiter(mapEnv(map[string]string{
		"KAFKA_BROKERS":         "a:9092, b:9093",
		"REDIS_CLUSTER_ADDRS":   "10.0.0.1:7000,[::1]:7001",
		"TRUSTED_PROXIES":       "10.0.0.0/8, 192.168.1.1, ::1",
		"AUTH_DENY_STATUS":      "403",
		"REDIS_TIMEOUT":         "2s",
		"OVER_LIMIT_CACHE_SIZE": "0",
		"PPROF_ADDR":            "127.0.0.1:6060",
		"REDIS_PIPELINE_WAIT":   "0",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.KafkaBrokers) != 2 || len(c.RedisClusterAddrs) != 2 || len(c.TrustedProxies) != 3 ||
		c.AuthDenyStatus != 403 || c.RedisTimeout != 2*time.Second || c.OverLimitCache != 0 || c.PprofAddr != "127.0.0.1:6060" ||
		c.PipelineWait != 0 {
		t.Fatalf("unexpected config: %+v", c)
	}
}

func TestLoadLimiterErrorsNameTheVariable(t *testing.T) {
	tests := []struct{ name, key, value string }{
		{"bad duration", "REDIS_TIMEOUT", "fast"},
		{"negative duration", "SHUTDOWN_TIMEOUT", "-1s"},
		{"bad brokers", "KAFKA_BROKERS", "localhost"},
		{"bad proxies", "TRUSTED_PROXIES", "10.0.0.0/33"},
		{"bad deny status", "AUTH_DENY_STATUS", "418"},
		{"bad queue", "EVENT_QUEUE_SIZE", "0"},
		{"bad log level", "LOG_LEVEL", "loud"},
		{"bad listen", "LISTEN_ADDR", "8080"},
		{"zero warm-up timeout", "REDIS_WARMUP_TIMEOUT", "0"},
		{"bad warm-up timeout", "REDIS_WARMUP_TIMEOUT", "soon"},
		{"zero health interval", "REDIS_HEALTH_INTERVAL", "0"},
		{"zero failed checks", "REDIS_FAILED_CHECKS", "0"},
		{"zero expected instances", "LOCAL_EXPECTED_INSTANCES", "0"},
		{"zero check timeout", "REDIS_CHECK_TIMEOUT", "0s"},
		{"bad breaker", "REDIS_BREAKER_FAILURES", "many"},
		{"negative recover", "REDIS_RECOVER_AFTER", "-1s"},
		{"negative permissive", "PERMISSIVE_AFTER", "-5m"},
		{"bad permissive deny", "LIMITER_PERMISSIVE_DENY_RULES", "sometimes"},
		{"bad dynamic rules switch", "DYNAMIC_RULES", "maybe"},
		{"zero rules poll", "RULES_POLL_INTERVAL", "0"},
		{"negative over-limit cache", "OVER_LIMIT_CACHE_SIZE", "-1"},
		{"bad pprof address", "PPROF_ADDR", "6060"},
		{"bad grpc address", "GRPC_LISTEN_ADDR", "8083"},
		{"grpc on the decision port", "GRPC_LISTEN_ADDR", ":8080"},
		{"bad header name", "LIMIT_RESET_HEADER", "Rate Limit"},
		{"bad shadow switch", "SHADOW_MODE", "yes please"},
		{"empty address key", "RLS_ADDRESS_KEY", "\x01"},
		{"negative connection age", "GRPC_MAX_CONNECTION_AGE", "-1s"},
		{"no grpc connections", "GRPC_MAX_CONNECTIONS", "0"},
		{"no http connections", "HTTP_MAX_CONNECTIONS", "0"},
		{"negative pipeline wait", "REDIS_PIPELINE_WAIT", "-200us"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadLimiter(mapEnv(map[string]string{tt.key: tt.value}))
			if err == nil || !strings.Contains(err.Error(), tt.key) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("want one line naming %s, got %v", tt.key, err)
			}
		})
	}
}

// TRUSTED_PROXIES reads addresses as exempt.ips does: IPv4-mapped forms
// are reduced to IPv4, so they contain the IPv4 peers the server sees.
func TestTrustedProxiesNormalized(t *testing.T) {
	c, err := LoadLimiter(mapEnv(map[string]string{"TRUSTED_PROXIES": "::ffff:10.0.0.0/104, ::ffff:192.0.2.1"}))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"10.0.0.0/8", "192.0.2.1/32"} {
		if got := c.TrustedProxies[i].String(); got != want {
			t.Errorf("TrustedProxies[%d] = %s, want %s", i, got, want)
		}
	}
	if _, err := LoadLimiter(mapEnv(map[string]string{"TRUSTED_PROXIES": "fe80::1%eth0"})); err == nil {
		t.Error("a zoned address was accepted")
	}
}

// RLS_CONFIG_DIR is empty by default, else a directory the limiter can
// list; anything else is one line naming the variable.
func TestLoadLimiterRLSConfigDir(t *testing.T) {
	if c, err := LoadLimiter(mapEnv(nil)); err != nil || c.RLSConfigDir != "" {
		t.Fatalf("default RLSConfigDir %q, %v; want none", c.RLSConfigDir, err)
	}
	dir := t.TempDir()
	c, err := LoadLimiter(mapEnv(map[string]string{"RLS_CONFIG_DIR": dir}))
	if err != nil || c.RLSConfigDir != dir {
		t.Fatalf("RLSConfigDir %q, %v; want %q", c.RLSConfigDir, err, dir)
	}
	for name, value := range map[string]string{"missing": "/nonexistent/rls", "a file": "limiter_test.go"} {
		_, err := LoadLimiter(mapEnv(map[string]string{"RLS_CONFIG_DIR": value}))
		if err == nil || !strings.HasPrefix(err.Error(), "RLS_CONFIG_DIR: ") || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: want one line naming RLS_CONFIG_DIR, got %v", name, err)
		}
	}
}

// CONFIG_TYPE=GRPC_XDS_SOTW reads envoyproxy/ratelimit's xDS settings with
// its defaults; what cannot work together is one line naming a variable.
func TestLoadLimiterXDS(t *testing.T) {
	c, err := LoadLimiter(mapEnv(map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW",
		"CONFIG_GRPC_XDS_NODE_METADATA": "zone=a, team=edge", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "x-token:s3cret"}))
	if err != nil {
		t.Fatal(err)
	}
	x := c.XDS
	if c.ConfigType != ConfigXDS || x.ServerURL != "localhost:18000" || x.NodeID != "default" || x.TLS != nil ||
		x.BackoffInitial != 10*time.Second || x.BackoffMax != time.Minute || x.BackoffFactor != 0.5 || !x.BackoffJitter ||
		x.NodeMetadata["zone"] != "a" || x.NodeMetadata["team"] != "edge" || x.Headers["x-token"] != "s3cret" || x.ForceStart {
		t.Errorf("xDS settings %+v", x)
	}
	if c, err := LoadLimiter(mapEnv(map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_USE_TLS": "true"})); err != nil || c.XDS.TLS == nil {
		t.Errorf("TLS to the xDS server: %v, %+v", err, c.XDS.TLS)
	}
	for name, env := range map[string]map[string]string{
		"CONFIG_TYPE":                      {"CONFIG_TYPE": "GRPC_XDS_DELTA"},
		"RLS_CONFIG_DIR":                   {"CONFIG_TYPE": "GRPC_XDS_SOTW", "RLS_CONFIG_DIR": t.TempDir()},
		"CONFIG_GRPC_XDS_SERVER_USE_TLS":   {"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT": "ca.pem"},
		"CONFIG_GRPC_XDS_CLIENT_TLS_CERT":  {"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_USE_TLS": "true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": "c.pem"},
		"CONFIG_GRPC_XDS_NODE_METADATA":    {"CONFIG_GRPC_XDS_NODE_METADATA": "zone"},
		"XDS_CLIENT_BACKOFF_RANDOM_FACTOR": {"XDS_CLIENT_BACKOFF_RANDOM_FACTOR": "0"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := LoadLimiter(mapEnv(env))
			if err == nil || !strings.HasPrefix(err.Error(), name+" ") && !strings.HasPrefix(err.Error(), name+":") || strings.Contains(err.Error(), "\n") {
				t.Errorf("want one line naming %s, got %v", name, err)
			}
		})
	}
}
