package redisstore

import (
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden/internal/decide"
)

// scriptCall is one call of a script: the script (nil: not sent), its KEYS
// and its ARGV, or instead lean, a call of a lean script (lua.OneLimit,
// lua.NoHolds), whose KEYS and ARGV evalSha writes from the call's own
// fields without building them first. A counted call (see counted.go) has
// no script: counted is set, and the round trip sets key, ttl and incr.
type scriptCall struct {
	script *redis.Script
	keys   []string
	args   []any
	lean   *decide.Call
	once   bool // gives units back: sent at most once (see sentOnce)

	counted *decide.Call
	key     string        // the counter of the call's window
	ttl     int64         // its expiry, ms
	incrBy  int64         // the call's cost, 0 for a probe
	incr    *redis.IntCmd // INCRBY key incrBy
}

// width is the number of KEYS and ARGV of c.
func (c *scriptCall) width() int {
	switch {
	case c.counted != nil:
		return 3 // with the 3 every call is given: INCRBY's and PEXPIRE's three arguments each
	case c.lean != nil:
		return 3 + limitWidth(c.lean)*len(c.lean.Limits)
	}
	return len(c.keys) + len(c.args)
}

// keysArgs returns c's KEYS and ARGV, built for a lean call.
func (c *scriptCall) keysArgs() ([]string, []any) {
	if c.lean != nil {
		return []string{c.lean.Keys.State}, leanArgs(c.lean)
	}
	return c.keys, c.args
}

// eval runs c with EVAL, which caches its script on the server.
func (c *scriptCall) eval(ctx context.Context, client scripter) *redis.Cmd {
	keys, args := c.keysArgs()
	if c.once {
		client = onceScripter{client}
	}
	return c.script.Eval(ctx, client, keys, args...)
}

// command returns cmd, c's command, as it is to be sent.
func (c *scriptCall) command(cmd redis.Cmder) redis.Cmder {
	if c.once {
		return sentOnce{cmd}
	}
	return cmd
}

// sentOnce is a command go-redis never sends again by itself. It resends a
// command, or a whole pipeline, whose reply it could not read (the
// connection cut after the server ran it: a failover, a proxy, a client
// killed), which only debits a key twice, except for a call that gives
// units back (a lease's settlement or give-back, a refund): twice, it
// would credit them twice, and the key would admit them again. Such a call
// fails instead, and its units stay debited, unused, until their window or
// slot ends.
type sentOnce struct{ redis.Cmder }

// NoRetry tells go-redis not to resend the command, nor the pipeline it is in.
func (sentOnce) NoRetry() bool { return true }

// scripter runs EVAL: a client or a pipeline.
type scripter interface {
	redis.Scripter
	Process(ctx context.Context, cmd redis.Cmder) error
}

// onceScripter sends the EVAL of a script as a command sent once.
type onceScripter struct{ scripter }

// Eval sends the EVAL of script as go-redis's own Eval does, once.
func (s onceScripter) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, "eval", script, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	cmd := redis.NewCmd(ctx, append(a, args...)...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3) // the cluster client routes by the first key
	}
	_ = s.Process(ctx, sentOnce{cmd})
	return cmd
}

// runScripts runs calls in one round trip, by digest (EVALSHA), pipelined
// when there are several, and runs again with EVAL, in a second round trip,
// the calls whose server lacked their script (restart, SCRIPT FLUSH, a new
// or promoted cluster node): on a cluster only those of the nodes that
// lacked it, and the first EVAL caches it there. A counted call goes in the
// same pipeline as its INCRBY and PEXPIRE, read from its incr, and gets a
// nil command, as does a call without a script, which is not sent. Errors
// are read per command.
//
// The replies are read as arrays of integers, as the rate-limit scripts
// answer: go-redis reads them into one []int64, where a generic reply would
// box every integer past 255.
//
// pipe, when not nil, is a pipeline of client's to send them with, reused
// from one round trip to the next (a new one costs four allocations).
func runScripts(ctx context.Context, client redis.UniversalClient, pipe redis.Pipeliner, calls []scriptCall) []*redis.IntSliceCmd {
	return runCommands(ctx, client, pipe, calls, redis.NewIntSliceCmd, intsOf)
}

// runScriptReplies is runScripts for scripts whose replies are not arrays
// of integers: the replies are generic.
func runScriptReplies(ctx context.Context, client redis.UniversalClient, calls []scriptCall) []*redis.Cmd {
	return runCommands(ctx, client, nil, calls, redis.NewCmd, func(c *redis.Cmd) *redis.Cmd { return c })
}

// runCommands is runScripts with commands made by newCmd; fromEval turns the
// reply of an EVAL (the rare second round trip) into one of them.
//
// The EVALSHA commands are built here rather than by Script.EvalSha, which
// boxes every key and the digest into a new argument slice per call: the
// keys and the digest go in as pointers (boxing a pointer allocates
// nothing) and the arguments of all the calls share one pooled slice,
// which go-redis reads only while it sends them.
func runCommands[C redis.Cmder](ctx context.Context, client redis.UniversalClient, pipe redis.Pipeliner, calls []scriptCall,
	newCmd func(context.Context, ...any) C, fromEval func(*redis.Cmd) C) []C {
	cmds := make([]C, len(calls))
	arena := argArenas.Get().(*[]any)
	defer func() {
		clear(*arena) // drop the references to keys and arguments
		argArenas.Put(arena)
	}()
	*arena = (*arena)[:0]
	if len(calls) == 1 && calls[0].counted == nil {
		if c := &calls[0]; c.script != nil {
			cmds[0] = evalSha(ctx, arena, c, newCmd)
			_ = client.Process(ctx, c.command(cmds[0]))
			if isNoScript(cmds[0].Err()) {
				cmds[0] = fromEval(c.eval(ctx, client))
			}
		}
		return cmds
	}
	n := 0
	for i := range calls {
		n += 3 + calls[i].width()
	}
	*arena = slices.Grow(*arena, n) // room for every command: grown at most once
	if pipe == nil {
		pipe = client.Pipeline()
	}
	// Queued together: one append to the pipeline's queue, where a command
	// at a time grows it again and again.
	queued := cmderArenas.Get().(*[]redis.Cmder)
	defer func() {
		clear(*queued)
		*queued = (*queued)[:0]
		cmderArenas.Put(queued)
	}()
	for i := range calls {
		switch c := &calls[i]; {
		case c.counted != nil:
			*queued = c.commands(ctx, arena, *queued)
		case c.script != nil:
			cmds[i] = evalSha(ctx, arena, c, newCmd)
			*queued = append(*queued, c.command(cmds[i]))
		}
	}
	if len(*queued) == 0 {
		return cmds
	}
	_ = pipe.BatchProcess(ctx, *queued...)
	_, _ = pipe.Exec(ctx) // errors are read per command
	var missing []int
	for i := range cmds {
		if calls[i].script != nil && isNoScript(cmds[i].Err()) {
			missing = append(missing, i)
		}
	}
	switch len(missing) {
	case 0:
	case 1:
		c := &calls[missing[0]]
		cmds[missing[0]] = fromEval(c.eval(ctx, client))
	default:
		pipe := client.Pipeline()
		evals := make([]*redis.Cmd, len(missing))
		for j, i := range missing {
			c := &calls[i]
			evals[j] = c.eval(ctx, pipe)
		}
		_, _ = pipe.Exec(ctx)
		for j, i := range missing {
			cmds[i] = fromEval(evals[j])
		}
	}
	return cmds
}

// intsOf returns the reply of cmd, an EVAL, as an array of integers: the
// error errReply when it is not one.
func intsOf(cmd *redis.Cmd) *redis.IntSliceCmd {
	out := redis.NewIntSliceCmd(context.Background())
	v, err := cmd.Result()
	if err != nil {
		out.SetErr(err)
		return out
	}
	vals, ok := v.([]any)
	if !ok {
		out.SetErr(errReply)
		return out
	}
	ints := make([]int64, len(vals))
	for i, x := range vals {
		if ints[i], ok = x.(int64); !ok {
			out.SetErr(errReply)
			return out
		}
	}
	out.SetVal(ints)
	return out
}

// argArenas and cmderArenas recycle the argument and command slices of
// runScripts.
var (
	argArenas   = sync.Pool{New: func() any { return new([]any) }}
	cmderArenas = sync.Pool{New: func() any { return new([]redis.Cmder) }}
)

// evalSha returns the EVALSHA command of c made by newCmd, its arguments
// appended to arena. Commands made before keep theirs if arena grows.
func evalSha[C redis.Cmder](ctx context.Context, arena *[]any, c *scriptCall, newCmd func(context.Context, ...any) C) C {
	start := len(*arena)
	if c.lean != nil {
		*arena = appendLean(*arena, digestOf(c.script), c.lean)
	} else {
		*arena = append(*arena, "evalsha", digestOf(c.script), len(c.keys))
		for i := range c.keys {
			*arena = append(*arena, &c.keys[i])
		}
		*arena = append(*arena, c.args...)
	}
	cmd := newCmd(ctx, (*arena)[start:len(*arena):len(*arena)]...)
	if c.lean != nil || len(c.keys) > 0 {
		cmd.SetFirstKeyPos(3) // the cluster client routes by the first key
	}
	return cmd
}

// appendLean appends the EVALSHA of a lean script: its one key and the
// ARGV of leanArgs, as pointers into c (c and its limits outlive the round
// trip), so that only a period in milliseconds past 255 is boxed.
func appendLean(a []any, digest *string, c *decide.Call) []any {
	a = append(a, "evalsha", digest, 1, &c.Keys.State, &c.NowMs, &c.Cost)
	for i := range c.Limits {
		l := &c.Limits[i]
		if c.Algorithm == decide.TokenBucket {
			a = append(a, &l.Rate, l.Per.Milliseconds(), &l.Burst)
		} else {
			a = append(a, &l.Requests, l.Per.Milliseconds())
		}
	}
	return a
}

// scriptDigests interns the digests of the scripts, for digestOf: as many
// as there are distinct scripts.
var scriptDigests struct {
	mu sync.RWMutex
	m  map[string]*string
}

// digestOf returns the digest of script as a pointer, which an argument
// slice holds without allocating.
func digestOf(script *redis.Script) *string {
	h := script.Hash()
	scriptDigests.mu.RLock()
	d := scriptDigests.m[h]
	scriptDigests.mu.RUnlock()
	if d != nil {
		return d
	}
	scriptDigests.mu.Lock()
	defer scriptDigests.mu.Unlock()
	if d = scriptDigests.m[h]; d == nil {
		if scriptDigests.m == nil {
			scriptDigests.m = make(map[string]*string)
		}
		digest := h // h itself stays on the stack
		d = &digest
		scriptDigests.m[h] = d
	}
	return d
}

func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}
