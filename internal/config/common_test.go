package config

import (
	"slices"
	"strings"
	"testing"
)

func TestRedisSentinel(t *testing.T) {
	c, err := LoadLimiter(mapEnv(map[string]string{
		"REDIS_SENTINEL_ADDRS":  "10.0.0.1:26379, [::1]:26380",
		"REDIS_SENTINEL_MASTER": "mymaster",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.RedisSentinelAddrs, []string{"10.0.0.1:26379", "[::1]:26380"}) || c.RedisSentinelMaster != "mymaster" {
		t.Fatalf("sentinel config: %+v %q", c.RedisSentinelAddrs, c.RedisSentinelMaster)
	}
	d, err := LoadDetector(mapEnv(map[string]string{"REDIS_SENTINEL_ADDRS": "s:26379", "REDIS_SENTINEL_MASTER": "m"}))
	if err != nil || d.RedisSentinelMaster != "m" || len(d.RedisSentinelAddrs) != 1 {
		t.Fatalf("detector sentinel config: %+v %v", d.Common, err)
	}
	if c, err := LoadLimiter(mapEnv(nil)); err != nil || c.RedisSentinelAddrs != nil || c.RedisSentinelMaster != "" {
		t.Fatalf("sentinel is off by default: %+v %v", c.Common, err)
	}
}

func TestRedisSentinelErrorsNameTheVariables(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want []string
	}{
		{"addresses without master", map[string]string{"REDIS_SENTINEL_ADDRS": "s:26379"}, []string{"REDIS_SENTINEL_MASTER", "REDIS_SENTINEL_ADDRS"}},
		{"master without addresses", map[string]string{"REDIS_SENTINEL_MASTER": "m"}, []string{"REDIS_SENTINEL_ADDRS", "REDIS_SENTINEL_MASTER"}},
		{"bad address", map[string]string{"REDIS_SENTINEL_ADDRS": "sentinel", "REDIS_SENTINEL_MASTER": "m"}, []string{"REDIS_SENTINEL_ADDRS", "host:port"}},
		{"with cluster", map[string]string{"REDIS_SENTINEL_ADDRS": "s:26379", "REDIS_SENTINEL_MASTER": "m", "REDIS_CLUSTER_ADDRS": "c:7000"},
			[]string{"REDIS_CLUSTER_ADDRS", "REDIS_SENTINEL_ADDRS"}},
		{"master only, with cluster", map[string]string{"REDIS_SENTINEL_MASTER": "m", "REDIS_CLUSTER_ADDRS": "c:7000"},
			[]string{"REDIS_CLUSTER_ADDRS", "REDIS_SENTINEL_MASTER"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, load := range []func(func(string) string) error{
				func(g func(string) string) error { _, err := LoadLimiter(g); return err },
				func(g func(string) string) error { _, err := LoadDetector(g); return err },
			} {
				err := load(mapEnv(tt.env))
				if err == nil {
					t.Fatal("want an error")
				}
				for _, w := range tt.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not name %s", err, w)
					}
				}
			}
		})
	}
}

// An INSTANCE_ID longer than the instance field of a decision event may be
// stops the process at start: the detector and the archiver would refuse
// every event it names.
func TestInstanceIDBound(t *testing.T) {
	if _, err := LoadLimiter(mapEnv(map[string]string{"INSTANCE_ID": strings.Repeat("i", 256)})); err != nil {
		t.Fatalf("256 bytes: %v", err)
	}
	_, err := LoadLimiter(mapEnv(map[string]string{"INSTANCE_ID": strings.Repeat("i", 257)}))
	if err == nil || !strings.Contains(err.Error(), "INSTANCE_ID") {
		t.Fatalf("257 bytes: error %v, want one naming INSTANCE_ID", err)
	}
}

// The limiter and the detector both read USER_IDS_CASE_SENSITIVE: off by
// default (user ids folded), and a bad value names the variable.
func TestCaseSensitiveUserIDs(t *testing.T) {
	l, err := LoadLimiter(mapEnv(nil))
	if err != nil || l.CaseSensitiveUserIDs {
		t.Fatalf("limiter default: %v %v", l.CaseSensitiveUserIDs, err)
	}
	l, err = LoadLimiter(mapEnv(map[string]string{"USER_IDS_CASE_SENSITIVE": "true"}))
	if err != nil || !l.CaseSensitiveUserIDs {
		t.Fatalf("limiter: %v %v", l.CaseSensitiveUserIDs, err)
	}
	d, err := LoadDetector(mapEnv(map[string]string{"USER_IDS_CASE_SENSITIVE": "true"}))
	if err != nil || !d.CaseSensitiveUserIDs {
		t.Fatalf("detector: %v %v", d.CaseSensitiveUserIDs, err)
	}
	if _, err := LoadDetector(mapEnv(map[string]string{"USER_IDS_CASE_SENSITIVE": "sometimes"})); err == nil ||
		!strings.Contains(err.Error(), "USER_IDS_CASE_SENSITIVE") {
		t.Fatalf("bad value: %v", err)
	}
}
