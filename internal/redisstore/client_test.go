package redisstore

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestConnectSentinelTakesCredentialsFromURL(t *testing.T) {
	rdb, err := Connect(ClientConfig{URL: "redis://u:pw@ignored:6379/3", SentinelAddrs: []string{"127.0.0.1:1"},
		SentinelMaster: "m", Timeout: 50 * time.Millisecond, PoolSize: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	c, ok := rdb.(*redis.Client)
	if !ok {
		t.Fatalf("Connect with Sentinel returned %T, want go-redis's failover *redis.Client", rdb)
	}
	if o := c.Options(); o.Username != "u" || o.Password != "pw" || o.DB != 3 || o.ReadTimeout != 50*time.Millisecond || o.PoolSize != 7 {
		t.Fatalf("failover options: user %q db %d timeout %v pool %d", o.Username, o.DB, o.ReadTimeout, o.PoolSize)
	}
}

func TestConnectSentinelNeedsMaster(t *testing.T) {
	if _, err := Connect(ClientConfig{SentinelAddrs: []string{"127.0.0.1:1"}}); err == nil || !strings.Contains(err.Error(), "REDIS_SENTINEL_MASTER") {
		t.Fatalf("want an error naming REDIS_SENTINEL_MASTER, got %v", err)
	}
}

func TestTarget(t *testing.T) {
	tests := []struct {
		name string
		cfg  ClientConfig
		want string
	}{
		{"single", ClientConfig{URL: "redis://u:secret@h:6379/0"}, "redis://u:xxxxx@h:6379/0"},
		{"cluster", ClientConfig{ClusterAddrs: []string{"a:7000", "b:7001"}}, "cluster a:7000,b:7001"},
		{"sentinel", ClientConfig{URL: "redis://:secret@h/0", SentinelAddrs: []string{"s1:26379", "s2:26379"}, SentinelMaster: "m"},
			"sentinel m@s1:26379,s2:26379"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.cfg.Target(); got != tt.want {
				t.Fatalf("Target() = %q, want %q", got, tt.want)
			}
		})
	}
}
