package redisstore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/lua"
)

// giveBackScript undoes what a call counted (lua/give_back.lua), for every
// algorithm and layout.
var giveBackScript = redis.NewScript(lua.GiveBack())

// GiveBack gives back, in one round trip, what Redis counted for calls
// whose callers were refused without their answers: one give_back.lua per
// give-back (see decide.GiveBack for what each undoes, and
// decide.Memory.GiveBack, its model, for the rule per algorithm),
// pipelined, by digest, and run again with EVAL on a server that lacked
// the script. Each is sent at most once: go-redis never sends one again by
// itself (see sentOnce), since twice it would take the units of other calls
// off the key; but the release of a concurrency hold, which is idempotent. It returns per give-back the units given back (0: none, for
// a give-back of nothing, of a window or slot since gone, or of a log
// member with too many after it) and, when any failed, one error per
// give-back (nil for those that succeeded). A failed give-back may still
// have run: its units are then given back without the caller knowing it.
func (s *Store) GiveBack(ctx context.Context, gs []decide.GiveBack) ([]int64, []error) {
	return s.giveBack(ctx, gs, 0)
}

// giveBack is GiveBack at nowMs on the servers' clocks (0: each reads its
// own, as in production; tests give the time of their calls).
func (s *Store) giveBack(ctx context.Context, gs []decide.GiveBack, nowMs int64) ([]int64, []error) {
	units := make([]int64, len(gs))
	var errs []error
	fail := func(i int, err error) {
		if errs == nil {
			errs = make([]error, len(gs))
		}
		errs[i] = giveBackError(gs[i].Call, err)
	}
	calls := make([]scriptCall, len(gs))
	for i := range gs {
		g := &gs[i]
		if err := g.Call.Validate(); err != nil {
			fail(i, err)
			continue
		}
		if _, ok := decide.GiveBackOf(g.Call, g.Result); !ok {
			continue // nothing to give back: nothing sent
		}
		calls[i] = giveBackCall(g, nowMs)
	}
	cmds := runCommands(ctx, s.client, nil, calls, redis.NewIntCmd, intOf)
	for i, cmd := range cmds {
		if calls[i].script == nil {
			continue
		}
		n, err := cmd.Result()
		if err != nil {
			fail(i, err)
			continue
		}
		units[i] = n
	}
	return units, errs
}

// giveBackCall returns g's give-back as a call of give_back.lua, sent once
// but for a concurrency hold's: a release, which may be resent.
func giveBackCall(g *decide.GiveBack, nowMs int64) scriptCall {
	once := g.Call.Algorithm != decide.Concurrency
	return scriptCall{script: giveBackScript, keys: []string{giveBackKey(g)}, args: giveBackArgs(g, nowMs), once: once}
}

// giveBackKey is the key g's give-back works on: the call's state key, or
// for a counted call the counter of the window it was counted in.
func giveBackKey(g *decide.GiveBack) string {
	c := &g.Call
	if !c.Counted() {
		return c.Keys.State
	}
	per := c.Limits[0].Per.Milliseconds()
	index, _ := decide.CountedWindow(g.Result.At, per)
	return countedKey(c.Keys.State, per, index)
}

// giveBackArgs encodes the ARGV of give_back.lua (see its header).
func giveBackArgs(g *decide.GiveBack, nowMs int64) []any {
	c := &g.Call
	layout := string(c.Algorithm)
	if c.Counted() {
		layout = "counted"
	}
	a := make([]any, 0, 6+limitWidth(c)*len(c.Limits))
	a = append(a, nowMs, layout, g.Units(), g.Result.At, g.Result.Granted, g.Result.LeaseUntil)
	if c.Algorithm == decide.Concurrency {
		return append(a, c.HoldID)
	}
	return appendLimits(a, c)
}

// intOf returns the reply of cmd, an EVAL, as an integer: the error
// errReply when it is not one.
func intOf(cmd *redis.Cmd) *redis.IntCmd {
	out := redis.NewIntCmd(context.Background())
	v, err := cmd.Result()
	if err != nil {
		out.SetErr(err)
		return out
	}
	n, ok := v.(int64)
	if !ok {
		out.SetErr(errReply)
		return out
	}
	out.SetVal(n)
	return out
}

func giveBackError(c decide.Call, err error) error {
	key := c.Keys.State
	if len(key) > maxKeyInError {
		key = key[:maxKeyInError] + "..."
	}
	return fmt.Errorf("redis give-back %s key %s: %w", c.Algorithm, strconv.Quote(key), err)
}
