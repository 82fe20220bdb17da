package redisstore

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden/lua"
)

// clockRefresh is the age after which a round trip carrying counted calls
// also samples its node's clock again. Between samples the estimate runs on
// this process's monotonic clock, which a step of the wall clock does not
// move; it follows the server's within NTP's slew (at most 0.5 ms a second).
const clockRefresh = time.Second

// clockScript answers the server's clock (lua/clock.lua).
var clockScript = redis.NewScript(lua.Clock())

// nodeClock estimates one Redis server's clock. Calls decided by a script
// read redis.call('TIME') inside it; counted calls (decide.Call.Counted)
// name their window in their key, so the limiter must know the server's
// time before it sends them. Every limiter samples the same server, so all
// of them place a call in the same window whatever their own clocks say,
// give or take half a round trip.
type nodeClock struct {
	last atomic.Pointer[clockSample]
}

// clockSample is one reading of the server's clock.
type clockSample struct {
	serverMs int64     // the server's clock at at
	at       time.Time // this process's clock (monotonic) midway through the round trip
}

// now returns the server's time in ms and how old the estimate is; ok is
// false before the first sample.
func (c *nodeClock) now() (ms int64, age time.Duration, ok bool) {
	s := c.last.Load()
	if s == nil {
		return 0, 0, false
	}
	age = time.Since(s.at)
	return s.serverMs + age.Milliseconds(), age, true
}

// read returns now's answer, sampling the server's clock first (key routes
// the sample on a cluster) when there is no sample yet, or when it is older
// than maxAge (0: any age will do).
func (c *nodeClock) read(ctx context.Context, client redis.UniversalClient, key string, maxAge time.Duration) (int64, time.Duration, error) {
	if ms, age, ok := c.now(); ok && (maxAge == 0 || age <= maxAge) {
		return ms, age, nil
	}
	if err := c.sample(ctx, client, key); err != nil {
		return 0, 0, err
	}
	ms, age, _ := c.now()
	return ms, age, nil
}

// record takes the server's answer serverMs to a sample sent at sent and
// answered at received.
func (c *nodeClock) record(sent, received time.Time, serverMs int64) {
	c.last.Store(&clockSample{serverMs: serverMs, at: sent.Add(received.Sub(sent) / 2)})
}

// sample reads the server's clock in a round trip of its own; key routes it
// to the server on a cluster.
func (c *nodeClock) sample(ctx context.Context, client redis.UniversalClient, key string) error {
	call := []scriptCall{{script: clockScript, keys: []string{key}}}
	sent := time.Now()
	ms, err := runScripts(ctx, client, nil, call)[0].Result()
	if err != nil {
		return err
	}
	if len(ms) != 1 {
		return errReply
	}
	c.record(sent, time.Now(), ms[0])
	return nil
}

// sampleNode is sample on the client of one server, with TIME.
func (c *nodeClock) sampleNode(ctx context.Context, node *redis.Client) error {
	sent := time.Now()
	t, err := node.Time(ctx).Result()
	if err != nil {
		return err
	}
	c.record(sent, time.Now(), t.UnixMilli())
	return nil
}

// clocks holds one nodeClock per server, by address ("" for a single
// server), shared by the lanes and Store.Decide.
type clocks struct {
	mu sync.Mutex
	m  map[string]*nodeClock
}

// of returns the clock of the server at addr.
func (cs *clocks) of(addr string) *nodeClock {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.m == nil {
		cs.m = make(map[string]*nodeClock)
	}
	c := cs.m[addr]
	if c == nil {
		c = new(nodeClock)
		cs.m[addr] = c
	}
	return c
}
