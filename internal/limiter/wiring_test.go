package limiter_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden/internal/redisstore"
	"github.com/ratewarden/ratewarden/internal/rules"
)

// redisOn returns a client of the Redis at addr, connected as cmd/limiter
// connects (redisstore.Connect), closed when the test ends.
func redisOn(tb testing.TB, addr string, timeout time.Duration, pool int) redis.UniversalClient {
	tb.Helper()
	rdb, err := redisstore.Connect(redisstore.ClientConfig{URL: "redis://" + addr + "/0", Timeout: timeout, PoolSize: pool})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// ruleSet parses and compiles the rules file text under the key prefix.
func ruleSet(tb testing.TB, text, prefix string) *rules.Set {
	tb.Helper()
	file, err := rules.Parse([]byte(text))
	if err != nil {
		tb.Fatal(err)
	}
	set, err := rules.Compile(file, rules.Options{KeyPrefix: prefix})
	if err != nil {
		tb.Fatal(err)
	}
	return set
}
