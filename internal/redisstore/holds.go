package redisstore

import (
	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/lua"
)

// holdScript takes and releases the holds of concurrency limits
// (lua/concurrency.lua).
var holdScript = redis.NewScript(lua.Concurrency())

// holdCall returns c, a call of decide.Concurrency, as a call of
// holdScript. A take and its release name the same state key, so they
// reach the same node of a cluster; both are idempotent (a resent take
// finds its hold, a resent release none), so go-redis may send them again.
func holdCall(c *decide.Call) scriptCall {
	return scriptCall{script: holdScript, keys: []string{c.Keys.State}, args: holdArgs(c)}
}

// holdArgs encodes the ARGV of lua/concurrency.lua: now, cost, release,
// hold id, the most holds and their lifetime.
func holdArgs(c *decide.Call) []any {
	release := int64(0)
	if c.Release {
		release = 1
	}
	l := c.Limits[0]
	return []any{c.NowMs, c.Cost, release, c.HoldID, l.Requests, l.Per.Milliseconds()}
}
